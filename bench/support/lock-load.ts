import { setTimeout as sleep } from 'node:timers/promises';
import type { ContenderSession } from '../contenders/contender.js';
import { jainIndex, LatencyRecorder, type LatencySummary } from './latency.js';

export interface ThroughputResult {
  readonly cycles: number;
  readonly seconds: number;
  /** Completed acquire+release cycles per second in the measured window. */
  readonly rate: number;
  /** Cycles completed in the whole run, warm-up included. */
  readonly allCycles: number;
  readonly errors: number;
  readonly firstError: string | undefined;
}

/** What a latency sample spans: the acquire alone, or the whole cycle (acquire + release). */
export type Timed = 'acquire' | 'cycle';

/**
 * Closed loop, no contention: `concurrency` callers, each acquiring a fresh
 * key and releasing it, again and again. Cycles that end inside the measured
 * window (after the warm-up) count; their acquire latency (or, with `timed:
 * 'cycle'`, acquire + release) goes to `latency`.
 */
export async function uncontendedLoad(
  session: ContenderSession,
  options: {
    concurrency: number;
    warmupMs: number;
    measureMs: number;
    keyPrefix: string;
    latency?: LatencyRecorder;
    /** Default `acquire`. */
    timed?: Timed;
  },
): Promise<ThroughputResult> {
  const wholeCycle = options.timed === 'cycle';
  const latency = options.latency ?? new LatencyRecorder();
  const start = performance.now();
  const measureFrom = start + options.warmupMs;
  const measureTo = measureFrom + options.measureMs;
  let cycles = 0;
  let allCycles = 0;
  let errors = 0;
  let firstError: string | undefined;
  const worker = async (w: number) => {
    for (let i = 0; ; i++) {
      const key = `${options.keyPrefix}:${w}:${i}`;
      const t0 = performance.now();
      if (t0 >= measureTo) return;
      try {
        const handle = await session.acquire(key);
        const t1 = performance.now();
        await session.release(handle, key);
        const t2 = performance.now();
        allCycles++;
        if (t2 >= measureFrom && t2 < measureTo) {
          cycles++;
          latency.record((wholeCycle ? t2 : t1) - t0);
        }
      } catch (error) {
        errors++;
        firstError ??= (error as Error).message;
        if (errors > 1000) throw error;
      }
    }
  };
  await Promise.all(Array.from({ length: options.concurrency }, (_, w) => worker(w)));
  const seconds = options.measureMs / 1000;
  return { cycles, seconds, rate: cycles / seconds, allCycles, errors, firstError };
}

/** Runs `total` acquire+release cycles on fresh keys, calling `checkpoint` at the given counts. */
export async function countedLoad(
  session: ContenderSession,
  options: {
    concurrency: number;
    total: number;
    keyPrefix: string;
    checkpoints: readonly number[];
    checkpoint: (done: number) => Promise<void>;
  },
): Promise<void> {
  let issued = 0;
  let done = 0;
  const marks = [...options.checkpoints].sort((a, b) => a - b);
  let pause: Promise<void> | undefined;
  const worker = async () => {
    while (issued < options.total) {
      if (pause) await pause;
      const i = issued++;
      const key = `${options.keyPrefix}:${i}`;
      await session.release(await session.acquire(key), key);
      done++;
      if (marks.length > 0 && done >= marks[0] && !pause) {
        const mark = marks.shift() as number;
        pause = options.checkpoint(mark).finally(() => (pause = undefined));
      }
    }
  };
  await Promise.all(Array.from({ length: options.concurrency }, worker));
  if (pause) await pause;
}

export interface HandoffResult {
  readonly grants: number;
  readonly seconds: number;
  readonly rate: number;
  /** Time from asking to getting the lock. */
  readonly wait: LatencySummary;
  readonly perWorker: readonly number[];
  readonly fairness: number;
  /** Failed acquisitions (retry budget or deadline ran out); the worker then asks again. */
  readonly failures: number;
  readonly firstFailure: string | undefined;
  /** Grants while another worker of this run still held the lock: must be 0. */
  readonly overlaps: number;
}

export interface HandoffOptions {
  readonly workers: number;
  readonly holdMs: number;
  readonly workMs: number;
  readonly warmupMs: number;
  readonly measureMs: number;
  readonly key: string;
}

/** The measured window of a hand-off, in ms of the workers' shared clock. */
export interface HandoffWindow {
  readonly measureFrom: number;
  readonly measureTo: number;
  /** The shared clock: performance.now() in one process, epoch ms across processes. */
  now(): number;
}

/** What one hand-off worker did in the measured window. */
export interface HandoffWorkerResult {
  /** Its waits from asking to getting, in ms, one per grant in the window. */
  readonly waits: number[];
  /** [got, let go] of each hold, on the shared clock (for overlaps across workers). */
  readonly holds: [number, number][];
  failures: number;
  firstFailure: string | undefined;
}

/**
 * One hand-off worker: asks (waiting with the library's retry), holds for
 * `holdMs`, releases, works `workMs` unlocked, asks again, until the window
 * ends. When the library gives up (its retry budget ran out), the worker asks
 * again at once; its wait counts from its first ask, since it still has not
 * got the lock. Fills `result` as it goes, so that what it did so far can be
 * read while it is stuck in a library's call.
 */
export async function handoffWorker(
  session: ContenderSession,
  worker: number,
  options: HandoffOptions,
  window: HandoffWindow,
  result: HandoffWorkerResult = { waits: [], holds: [], failures: 0, firstFailure: undefined },
): Promise<HandoffWorkerResult> {
  const { now, measureFrom, measureTo } = window;
  let t0: number | undefined;
  while (now() < measureTo) {
    t0 ??= now();
    let handle: unknown;
    try {
      handle = await session.acquire(options.key, worker);
    } catch (error) {
      result.failures++;
      result.firstFailure ??= (error as Error).message;
      continue;
    }
    const t1 = now();
    await sleep(options.holdMs);
    result.holds.push([t1, now()]);
    await session.release(handle, options.key);
    if (t1 >= measureFrom && t1 < measureTo) result.waits.push(t1 - t0);
    t0 = undefined;
    await sleep(options.workMs);
  }
  return result;
}

/**
 * The hand-off's figures from its workers' results, their holds timed on one
 * clock (across processes, the machine's monotonic clock).
 */
export function handoffSummary(
  results: readonly HandoffWorkerResult[],
  options: HandoffOptions,
): HandoffResult {
  const wait = new LatencyRecorder();
  for (const r of results) for (const ms of r.waits) wait.record(ms);
  const perWorker = results.map((r) => r.waits.length);
  const holds = results.flatMap((r) => r.holds).sort((a, b) => a[0] - b[0]);
  let overlaps = 0;
  let heldUntil = -Infinity;
  for (const [got, letGo] of holds) {
    if (got < heldUntil) overlaps++;
    heldUntil = Math.max(heldUntil, letGo);
  }
  const grants = perWorker.reduce((a, b) => a + b, 0);
  const seconds = options.measureMs / 1000;
  return {
    grants,
    seconds,
    rate: grants / seconds,
    wait: wait.summary(),
    perWorker,
    fairness: jainIndex(perWorker),
    failures: results.reduce((a, r) => a + r.failures, 0),
    firstFailure: results.find((r) => r.firstFailure)?.firstFailure,
    overlaps,
  };
}

/** Hand-off on one hot key, every worker in this process (see {@link handoffWorker}). */
export async function handoffLoad(
  session: ContenderSession,
  options: HandoffOptions,
): Promise<HandoffResult> {
  const measureFrom = performance.now() + options.warmupMs;
  const window = {
    measureFrom,
    measureTo: measureFrom + options.measureMs,
    now: () => performance.now(),
  };
  const results = await Promise.all(
    Array.from({ length: options.workers }, (_, w) => handoffWorker(session, w, options, window)),
  );
  return handoffSummary(results, options);
}
