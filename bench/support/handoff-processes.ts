/**
 * The hand-off with each worker in a process of its own, as a service's
 * instances run: one session (one engine, or one peer's client set) per
 * process, and nothing shared between workers but the Redis nodes. This
 * file is both the bench's side (handoffInProcesses) and the worker
 * process's entry (run with BENCH_HANDOFF_WORKER set).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { waitingContender } from '../contenders/index.js';
import { compiledEngine } from './compiled-engine.js';
import {
  handoffSummary,
  handoffWorker,
  type HandoffOptions,
  type HandoffResult,
  type HandoffWorkerResult,
} from './lock-load.js';

/** What a worker process is told at start. */
interface WorkerSetup {
  readonly contender: string;
  readonly urls: readonly string[];
  readonly ttl: number;
  readonly worker: number;
  readonly options: HandoffOptions;
}

type FromWorker = { ready: true } | { result: HandoffWorkerResult } | { error: string };

/**
 * The machine's monotonic clock in ms (CLOCK_MONOTONIC, the same in every
 * process), so that the workers' holds can be compared between processes.
 */
const sharedNow = () => Number(process.hrtime.bigint()) / 1e6;

/** How long the workers have to open their sessions. */
const START_TIMEOUT_MS = 30_000;

/**
 * Runs the hand-off with `options.workers` processes, one worker each, all
 * starting together once every one has its session open. `onChild`: each
 * worker's pid, for the run's CPU accounts.
 */
export async function handoffInProcesses(
  contender: string,
  urls: readonly string[],
  ttl: number,
  options: HandoffOptions,
  onChild: (pid: number, exiting: boolean) => void,
): Promise<HandoffResult> {
  // Compiled here once: the workers load it as it is (BENCH_ENGINE_BUILT) instead of compiling it again.
  await compiledEngine();
  const children: ChildProcess[] = [];
  const exits: Promise<unknown>[] = [];
  try {
    for (let worker = 0; worker < options.workers; worker++) {
      const setup: WorkerSetup = { contender, urls, ttl, worker, options };
      const child = fork(fileURLToPath(import.meta.url), [], {
        // The bench's own flags (--import tsx): the worker is TypeScript too.
        execArgv: process.execArgv,
        env: {
          ...process.env,
          BENCH_HANDOFF_WORKER: JSON.stringify(setup),
          BENCH_ENGINE_BUILT: '1',
        },
        stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
      });
      children.push(child);
      exits.push(once(child, 'exit').catch(() => undefined));
      onChild(child.pid as number, false);
    }
    const messages = children.map((child) => nextMessage(child, START_TIMEOUT_MS));
    await Promise.all(messages.map((m) => m.then(expect('ready'))));
    // Every session is open: all start together, a moment from now.
    const start = sharedNow() + 50;
    const runMs = options.warmupMs + options.measureMs + START_TIMEOUT_MS;
    const results = children.map((child) => nextMessage(child, runMs));
    for (const child of children) child.send({ go: start });
    const done = await Promise.all(results.map((m) => m.then(expect('result'))));
    return handoffSummary(
      done.map((m) => (m as { result: HandoffWorkerResult }).result),
      options,
    );
  } finally {
    for (const child of children) {
      onChild(child.pid as number, true);
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    }
    await Promise.all(exits);
  }
}

/** The child's next message, or a rejection when it exits first or stays silent. */
function nextMessage(child: ChildProcess, timeoutMs: number): Promise<FromWorker> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      cleanUp();
      reject(new Error(`a hand-off worker said nothing within ${timeoutMs / 1000} s`));
    }, timeoutMs);
    const onMessage = (message: FromWorker) => {
      cleanUp();
      resolve(message);
    };
    const onExit = (code: number | null, signal: string | null) => {
      cleanUp();
      reject(new Error(`a hand-off worker exited (${signal ?? code}) early`));
    };
    const cleanUp = () => {
      clearTimeout(timer);
      child.off('message', onMessage);
      child.off('exit', onExit);
    };
    child.on('message', onMessage);
    child.on('exit', onExit);
  });
}

function expect(kind: 'ready' | 'result') {
  return (message: FromWorker): FromWorker => {
    if ('error' in message) throw new Error(`a hand-off worker failed: ${message.error}`);
    if (!(kind in message)) throw new Error(`a hand-off worker sent ${JSON.stringify(message)}`);
    return message;
  };
}

/**
 * How long after the window a worker still waits for a library's call in
 * flight (a lock it cannot get: some peers retry without end) before it
 * reports what it did without that call.
 */
const GRACE_MS = 2000;

/**
 * The worker process: opens the session, says ready, runs from the start it
 * is given, reports, then waits to be stopped (so that the bench can read its
 * CPU time first).
 */
async function workerMain(setup: WorkerSetup): Promise<void> {
  const send = (message: FromWorker) =>
    new Promise<void>((resolve) => process.send!(message, () => resolve()));
  try {
    const session = await waitingContender(setup.contender).open(setup.urls, {
      mode: 'wait',
      ttl: setup.ttl,
    });
    const [go] = (await Promise.all([once(process, 'message'), send({ ready: true })]))[0] as [
      { go: number },
    ];
    await sleep(Math.max(0, go.go - sharedNow()));
    const measureFrom = go.go + setup.options.warmupMs;
    const measureTo = measureFrom + setup.options.measureMs;
    const result: HandoffWorkerResult = {
      waits: [],
      holds: [],
      failures: 0,
      firstFailure: undefined,
    };
    const window = { measureFrom, measureTo, now: sharedNow };
    const stuck = new AbortController();
    await Promise.race([
      handoffWorker(session, setup.worker, setup.options, window, result),
      sleep(measureTo + GRACE_MS - sharedNow(), undefined, { signal: stuck.signal }).catch(
        () => undefined,
      ),
    ]);
    stuck.abort();
    await send({ result });
  } catch (error) {
    await send({ error: (error as Error).message });
  }
}

const setup = process.env.BENCH_HANDOFF_WORKER;
if (setup) await workerMain(JSON.parse(setup) as WorkerSetup);
