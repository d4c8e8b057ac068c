/**
 * A lock contender in its own OS process, for tests of mutual exclusion and
 * fencing across processes (test/engine/fencing-processes.spec.ts).
 *
 * ```sh
 * node --import tsx test/support/contender.ts \
 *   --nodes redis://127.0.0.1:7001,redis://127.0.0.1:7002 --resource stock:1 \
 *   --workers 3 --iterations 150
 * ```
 *
 * Protocol, one JSON object per line on stdout:
 * - `{"ready":true}` once the engine is connected;
 * - for every `go` line read on stdin, one round: each worker loops
 *   `iterations` times (acquire, hold ~1 ms, release, work `--pause` ms
 *   unlocked, default 2), then
 *   `{"records":[...]}` (or `{"error":"..."}` if an acquisition failed);
 * - when stdin ends, the engine is closed and the process exits.
 *
 * Times are milliseconds on the machine's monotonic clock (`machineNow`),
 * so records from different processes on one machine share one time line.
 */
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { LockEngine } from '../../lib/engine/index.js';
import { machineNow as now } from './machine-clock.js';

/** One grant as a contender saw it. */
export interface GrantRecord {
  readonly pid: number;
  readonly worker: number;
  readonly token: number;
  /** When acquire() resolved. */
  readonly grant: number;
  /** When release() was called. */
  readonly releaseStart: number;
  /** Whether the lock was still within its validity when its release started. */
  readonly heldAtRelease: boolean;
  /** Whether a quorum of nodes still held it and deleted it. */
  readonly released: boolean;
  /** Nodes whose answer to the release did not come within the node timeout. */
  readonly releaseFailures: number;
}

export type ContenderMessage =
  { readonly ready: true } | { readonly records: GrantRecord[] } | { readonly error: string };

const { values } = parseArgs({
  options: {
    nodes: { type: 'string' },
    resource: { type: 'string' },
    workers: { type: 'string', default: '3' },
    iterations: { type: 'string', default: '150' },
    ttl: { type: 'string', default: '5000' },
    pause: { type: 'string', default: '2' },
  },
});
if (!values.nodes || !values.resource) {
  throw new Error(
    'usage: contender.ts --nodes url,url,... --resource name [--workers n] [--iterations n]',
  );
}
const resource = values.resource;
const workers = Number(values.workers);
const iterations = Number(values.iterations);
const pause = Number(values.pause);

function send(message: ContenderMessage): void {
  process.stdout.write(`${JSON.stringify(message)}\n`);
}

const engine = new LockEngine({
  nodes: values.nodes.split(','),
  ttl: Number(values.ttl),
  // Up to two seconds for a node's answer (the default is a tenth of the ttl): four contender
  // processes and the suite share two cores, and a release the nodes answer late counts as
  // not released.
  nodeTimeout: Math.floor(Number(values.ttl) / 2.5),
  // Twelve contenders on one key poll for it; none may give up during a round.
  waitTimeout: 60_000,
  logger: {
    warn: (message) => process.stderr.write(`warn: ${message}\n`),
    error: (message) => process.stderr.write(`error: ${message}\n`),
  },
});

async function work(worker: number, records: GrantRecord[]): Promise<void> {
  for (let i = 0; i < iterations; i++) {
    const lock = await engine.acquire(resource);
    const grant = now();
    await sleep(1);
    const heldAtRelease = lock.isHeld;
    const releaseStart = now();
    const result = await lock.release();
    records.push({
      pid: process.pid,
      worker,
      token: lock.token!,
      grant,
      releaseStart,
      heldAtRelease,
      released: result.released,
      releaseFailures: result.failures.length,
    });
    // Unlocked work: without it the worker that just released asks again at once and nearly
    // always wins against waiters that are sleeping their retry delay, so the lock would
    // rarely change hands between processes.
    await sleep(pause);
  }
}

async function round(): Promise<void> {
  const records: GrantRecord[] = [];
  try {
    await Promise.all(Array.from({ length: workers }, (_, w) => work(w, records)));
    send({ records });
  } catch (error) {
    send({ error: error instanceof Error ? `${error.name}: ${error.message}` : String(error) });
  }
}

await engine.connect();
send({ ready: true });
for await (const line of createInterface({ input: process.stdin })) {
  if (line.trim() === 'go') await round();
}
await engine.close();
