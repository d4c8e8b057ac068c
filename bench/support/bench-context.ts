import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import type { RedisNodeProcess } from '../../dev/redis/redis-nodes.js';
import type { Contender, ContenderSession, OpenOptions } from '../contenders/contender.js';
import { processTicks } from './cpu-account.js';

/** A full GC: `--expose-gc`'s gc() when given, else the same function switched on at run time. */
export const forceGc: () => void = (() => {
  const exposed = (globalThis as { gc?: () => void }).gc;
  if (typeof exposed === 'function') return exposed;
  setFlagsFromString('--expose-gc');
  return runInNewContext('gc') as () => void;
})();

/** Timing of the duration-based scenarios, in ms. */
export interface BenchTiming {
  /** Uncontended runs: rounds per library, each a warm-up and a measured window. */
  readonly rounds: number;
  readonly warmupMs: number;
  readonly measureMs: number;
  readonly handoffWarmupMs: number;
  readonly handoffMeasureMs: number;
  /** Lock cycles of the heap-growth run. */
  readonly growthCycles: number;
  /** Locks held at once in the memory scenario. */
  readonly heldLocks: number;
  /** HTTP: rounds of each endpoint (interleaved), each run this long after one warm-up per endpoint. */
  readonly httpRounds: number;
  readonly httpWarmupMs: number;
  readonly httpMeasureMs: number;
}

export const FULL_TIMING: BenchTiming = {
  rounds: 5,
  warmupMs: 200,
  measureMs: 500,
  handoffWarmupMs: 500,
  handoffMeasureMs: 3000,
  growthCycles: 1_000_000,
  heldLocks: 10_000,
  httpRounds: 5,
  httpWarmupMs: 1000,
  httpMeasureMs: 1500,
};

export const QUICK_TIMING: BenchTiming = {
  rounds: 2,
  warmupMs: 150,
  measureMs: 250,
  handoffWarmupMs: 200,
  handoffMeasureMs: 800,
  growthCycles: 100_000,
  heldLocks: 10_000,
  httpRounds: 1,
  httpWarmupMs: 500,
  httpMeasureMs: 1000,
};

/** What a scenario gets from the runner. */
export class BenchContext {
  /** Results one scenario leaves for another (e.g. the floors of scenario 1). */
  readonly shared = new Map<string, unknown>();
  /** CPU clock ticks of child processes (other than the redis-servers) that have exited. */
  private exitedChildTicks = 0;
  private readonly children = new Set<number>();
  private readonly open = new Set<ContenderSession>();
  private closed = false;

  constructor(
    /** All nodes started for the run; an n-node configuration uses the first n. */
    readonly nodes: readonly RedisNodeProcess[],
    readonly timing: BenchTiming,
    readonly quick: boolean,
    private readonly nodeOverride: readonly number[] | undefined,
    /** The commit scenario 8 compares our engine with (`--baseline`). */
    readonly baseline?: string,
  ) {}

  /** Counts a child process's CPU in the run's accounts (call {@link childExiting} before it exits). */
  childStarted(pid: number): void {
    this.children.add(pid);
  }

  childExiting(pid: number): void {
    if (!this.children.delete(pid)) return;
    this.exitedChildTicks += processTicks(pid);
  }

  /** Clock ticks used by the child processes so far, live and exited. */
  childTicks(): number {
    let ticks = this.exitedChildTicks;
    for (const pid of this.children) ticks += processTicks(pid);
    return ticks;
  }

  /** The node counts a scenario runs on: --nodes when given, else its defaults. */
  nodeCounts(defaults: readonly number[]): number[] {
    return [...(this.nodeOverride ?? defaults)];
  }

  urls(count: number): string[] {
    return this.nodes.slice(0, count).map((node) => node.url);
  }

  log(message: string): void {
    process.stderr.write(`${message}\n`);
  }

  /** Empties every node and collects garbage, so each run starts from the same state. */
  async reset(): Promise<void> {
    this.checkOpen();
    await Promise.all(this.nodes.map((node) => node.cli('FLUSHALL', 'SYNC')));
    forceGc();
  }

  /** Sum of `used_memory` over the first `count` nodes, in bytes. */
  async redisUsedMemory(count: number): Promise<number> {
    this.checkOpen();
    const infos = await Promise.all(
      this.nodes.slice(0, count).map((node) => node.cli('INFO', 'memory')),
    );
    return infos.reduce((sum, info) => sum + Number(/used_memory:(\d+)/.exec(info)?.[1] ?? NaN), 0);
  }

  /** CPU seconds the first `count` redis-servers have used (INFO cpu, user + sys). */
  async redisCpuSeconds(count: number): Promise<number> {
    this.checkOpen();
    const infos = await Promise.all(
      this.nodes.slice(0, count).map((node) => node.cli('INFO', 'cpu')),
    );
    let seconds = 0;
    for (const info of infos) {
      seconds += Number(/used_cpu_user:([\d.]+)/.exec(info)?.[1] ?? NaN);
      seconds += Number(/used_cpu_sys:([\d.]+)/.exec(info)?.[1] ?? NaN);
    }
    return seconds;
  }

  /** Keys on the first node. */
  async dbSize(): Promise<number> {
    this.checkOpen();
    return Number(await this.nodes[0].cli('DBSIZE'));
  }

  /** Opens a session that is closed by {@link closeAll} if the run is interrupted. */
  async openSession(
    contender: Contender,
    count: number,
    options: OpenOptions,
  ): Promise<ContenderSession> {
    this.checkOpen();
    const session = await contender.open(this.urls(count), options);
    if (this.closed) {
      await session.close();
      throw new Error('the bench is shutting down');
    }
    this.open.add(session);
    return session;
  }

  async closeSession(session: ContenderSession): Promise<void> {
    this.open.delete(session);
    await session.close();
  }

  /** Runs `body` with a fresh session of `contender`, closed afterwards. */
  async withSession<T>(
    contender: Contender,
    count: number,
    options: OpenOptions,
    body: (session: ContenderSession) => Promise<T>,
  ): Promise<T> {
    const session = await this.openSession(contender, count, options);
    try {
      return await body(session);
    } finally {
      await this.closeSession(session);
    }
  }

  private checkOpen(): void {
    if (this.closed) throw new Error('the bench is shutting down');
  }

  /** Closes every open session and refuses new ones. */
  async closeAll(): Promise<void> {
    this.closed = true;
    const sessions = [...this.open];
    this.open.clear();
    await Promise.allSettled(sessions.map((session) => session.close()));
  }
}
