import net from 'node:net';
import type { ContenderSession } from '../contenders/contender.js';

/**
 * Where a lone caller's lock cycle (acquire, then release) spends its time,
 * in µs per cycle (means over the measured cycles). Each half of the cycle
 * is cut at its socket writes and at the reply that settled it:
 * `beforeSend` + `sending` + `betweenSends` + `waiting` + `afterReply` = `total`.
 */
export interface CycleAnatomy {
  /** Cycles measured (those whose halves each wrote and read). */
  readonly cycles: number;
  /** The whole cycle, as the caller sees it. */
  readonly total: number;
  /** From the call to its first socket write: the library's code before the command leaves. */
  readonly beforeSend: number;
  /** Inside the socket writes (the system calls that hand the commands to the kernel). */
  readonly sending: number;
  /** Between the first write's start and the last write's end, outside the writes (several nodes). */
  readonly betweenSends: number;
  /** From the last write to the reply that settled the call: the nodes' work, and the way there and back. */
  readonly waiting: number;
  /** From that reply to the call's promise settling: the library's code after the reply. */
  readonly afterReply: number;
}

interface Mark {
  readonly write: boolean;
  readonly start: number;
  readonly end: number;
}

type SegmentName = Exclude<keyof CycleAnatomy, 'cycles' | 'total'>;
type Segments = Record<SegmentName, number>;

/** The segments in report order, with their column names. */
export const ANATOMY_COLUMNS: readonly { readonly key: SegmentName; readonly label: string }[] = [
  { key: 'beforeSend', label: 'code before the write' },
  { key: 'sending', label: 'socket writes' },
  { key: 'betweenSends', label: 'between writes' },
  { key: 'waiting', label: 'waiting for the nodes' },
  { key: 'afterReply', label: 'code after the reply' },
];

/**
 * Records every socket write (with its duration) and every `data` event of
 * this process while `marks` is set. Returns the function that takes the
 * hooks off again.
 */
function hookSockets(marks: () => Mark[] | undefined): () => void {
  const proto = net.Socket.prototype as net.Socket & Record<string, unknown>;
  const write = proto.write;
  const emit = proto.emit;
  proto.write = function (this: net.Socket, ...args: unknown[]) {
    const list = marks();
    const start = performance.now();
    const result = (write as (...a: unknown[]) => boolean).apply(this, args);
    list?.push({ write: true, start, end: performance.now() });
    return result;
  } as typeof write;
  proto.emit = function (this: net.Socket, event: string | symbol, ...args: unknown[]) {
    if (event === 'data') {
      const at = performance.now();
      marks()?.push({ write: false, start: at, end: at });
    }
    return (emit as (...a: unknown[]) => boolean).call(this, event, ...args);
  } as typeof emit;
  return () => {
    proto.write = write;
    proto.emit = emit;
  };
}

/** One half of a cycle (`from` to `to`), split; undefined when it wrote or read nothing. */
function split(marks: readonly Mark[], from: number, to: number): Segments | undefined {
  const writes = marks.filter((m) => m.write && m.start >= from && m.start < to);
  const reads = marks.filter((m) => !m.write && m.start >= from && m.start <= to);
  if (writes.length === 0 || reads.length === 0) return undefined;
  const first = writes[0].start;
  const lastEnd = writes[writes.length - 1].end;
  const settledBy = reads[reads.length - 1].start;
  if (settledBy < lastEnd) return undefined;
  const sending = writes.reduce((sum, m) => sum + (m.end - m.start), 0);
  return {
    beforeSend: first - from,
    sending,
    betweenSends: lastEnd - first - sending,
    waiting: settledBy - lastEnd,
    afterReply: to - settledBy,
  };
}

/**
 * Runs `cycles` lone acquire+release cycles on fresh keys (after `warmup`
 * unmeasured ones) and splits their time at the socket writes and reads
 * (see CycleAnatomy). Nothing else may use sockets in this process meanwhile.
 */
export async function measureAnatomy(
  session: ContenderSession,
  options: { readonly cycles: number; readonly warmup: number; readonly keyPrefix: string },
): Promise<CycleAnatomy> {
  for (let i = 0; i < options.warmup; i++) {
    const key = `${options.keyPrefix}:warm-up:${i}`;
    await session.release(await session.acquire(key), key);
  }
  let current: Mark[] | undefined;
  const unhook = hookSockets(() => current);
  const sums: Segments = { beforeSend: 0, sending: 0, betweenSends: 0, waiting: 0, afterReply: 0 };
  let total = 0;
  let counted = 0;
  try {
    for (let i = 0; i < options.cycles; i++) {
      const key = `${options.keyPrefix}:${i}`;
      const marks: Mark[] = [];
      current = marks;
      const t0 = performance.now();
      const handle = await session.acquire(key);
      const t1 = performance.now();
      await session.release(handle, key);
      const t2 = performance.now();
      current = undefined;
      const acquiring = split(marks, t0, t1);
      const releasing = split(marks, t1, t2);
      if (!acquiring || !releasing) continue;
      counted++;
      total += t2 - t0;
      for (const { key } of ANATOMY_COLUMNS) sums[key] += acquiring[key] + releasing[key];
    }
  } finally {
    current = undefined;
    unhook();
  }
  const mean = (ms: number) => (counted === 0 ? NaN : (ms * 1000) / counted);
  const means = { ...sums };
  for (const { key } of ANATOMY_COLUMNS) means[key] = mean(sums[key]);
  return { cycles: counted, total: mean(total), ...means };
}
