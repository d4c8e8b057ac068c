/**
 * What the chaos runs record, shared by the lock clients (chaos-client.ts),
 * the harness (chaos-cluster.ts) and the checker (checker.ts).
 *
 * Times are milliseconds on one clock for every process of a run:
 * `process.hrtime.bigint()`, which on Linux reads CLOCK_MONOTONIC, a clock
 * the kernel keeps for the whole machine, counted from an origin the harness
 * takes and hands to each client (`--clock-origin`). Not
 * `performance.timeOrigin + performance.now()`: its base is the wall clock
 * read once when each process starts, so two processes' time lines differ by
 * whatever the wall clock did between their starts (a step, a slew) and by
 * the stall between the two reads, tens of ms under load; that alone makes
 * two holders that followed each other look like an overlap.
 */
import { performance } from 'node:perf_hooks';

let origin = process.hrtime.bigint();

/** The origin of this process's time line, for the clients it starts. */
export const clockOrigin = (): bigint => origin;

/** Puts this process on the time line of the process that started it. */
export function setClockOrigin(value: bigint): void {
  origin = value;
}

export const now = (): number => Number(process.hrtime.bigint() - origin) / 1e6;

/**
 * Converts an engine `performance.now()` reading of this process to the
 * shared time line. Both clocks are CLOCK_MONOTONIC with a different zero,
 * so the distance back from the present carries over exactly.
 */
export const absolute = (monotonic: number): number => now() - (performance.now() - monotonic);

/** A step of the host's wall clock seen during a run: `ms` > 0 is forward. */
export interface WallClockStep {
  /** Between these two samples, on the shared time line. */
  readonly since: number;
  readonly at: number;
  readonly ms: number;
}

/**
 * Watches the host's wall clock against the shared monotonic one. Redis
 * nodes expire keys by the wall clock, so a step forward shortens every lease
 * on them (the checker is told), and a run's figures say whether one
 * happened. Sampled at a fixed interval: between two samples both clocks
 * advance alike unless the wall clock was stepped; the slewing of time
 * synchronization is far below the threshold.
 */
export class WallClockWatch {
  readonly steps: WallClockStep[] = [];
  private timer: NodeJS.Timeout | undefined;
  private last: { mono: number; wall: number } | undefined;

  constructor(
    private readonly intervalMs = 100,
    private readonly thresholdMs = 5,
    private readonly clocks = { mono: now, wall: Date.now },
  ) {}

  start(): void {
    this.stop();
    this.steps.length = 0;
    this.last = undefined;
    this.sample();
    this.timer = setInterval(() => this.sample(), this.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) this.sample();
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Compares how far each clock moved since the last sample. */
  sample(): void {
    const before = this.clocks.mono();
    const wall = this.clocks.wall();
    const after = this.clocks.mono();
    // Descheduled between the reads: the pair says nothing about the wall clock.
    if (after - before > 1) return;
    const mono = (before + after) / 2;
    if (this.last) {
      const step = wall - this.last.wall - (mono - this.last.mono);
      if (Math.abs(step) > this.thresholdMs) {
        this.steps.push({ since: this.last.mono, at: mono, ms: step });
      }
    }
    this.last = { mono, wall };
  }
}

export type OpName =
  | 'acquire'
  | 'extend'
  | 'release'
  | 'read:control'
  | 'write:sqlite'
  | 'write:redis'
  | 'write:control';

/**
 * One step of one operation. An operation is an `invoke` followed by exactly
 * one of `ok`, `fail` (it did not happen) or `indeterminate` (it may have
 * happened: a timeout after the request was sent, or the client died).
 */
export interface OpEvent {
  readonly type: 'invoke' | 'ok' | 'fail' | 'indeterminate';
  readonly op: OpName;
  /** The client process's id in the run, e.g. `c2`. */
  readonly client: string;
  readonly worker: number;
  /** Pairs an invoke with its completion; unique per client. */
  readonly id: number;
  readonly time: number;
  readonly resource: string;
  /**
   * On an acquire's invoke: what it asks for, a hold of a read-write lock or
   * a semaphore's permit (absent: a lock).
   */
  readonly kind?: SharedKind;
  /** On a permit's acquire invoke: the semaphore's N. */
  readonly permits?: number;
  /** On a permit's acquire ok: the slot it holds. */
  readonly slot?: number;
  /** The fencing token the operation was made with (or, for acquire ok, granted). */
  readonly token?: number;
  /** The id of the acquire whose lock this operation used. */
  readonly lock?: number;
  /** End of the lock's validity on the shared time line (acquire and extend ok). */
  readonly validUntil?: number;
  /** Longest the operation may take, in ms, before it counts as hung (on invoke). */
  readonly bound?: number;
  /** What a write stored (unique per write), or what a read found. */
  readonly payload?: string;
  readonly value?: number;
  /** On a write's completion: whether the lock was still valid when the store answered. */
  readonly validAtEnd?: boolean;
  /** On release ok: whether a quorum still held the lock and deleted it. */
  readonly released?: boolean;
  readonly error?: string;
}

/** A fault the harness injected, with its interval (end undefined: until the run ended). */
export interface FaultEvent {
  readonly kind: string;
  /** `node2`, `proxy4`, `c1`... */
  readonly target: string;
  readonly start: number;
  end?: number;
  readonly note?: string;
  /** A `clock-step` of a node's wall clock: by how many ms (forward when positive). */
  readonly stepMs?: number;
}

/** One accepted write as a fenced store logged it, in the order it was accepted. */
export interface StoreEntry {
  readonly resource: string;
  readonly token: number;
  readonly payload: string;
}

export interface StoreSnapshot {
  readonly name: 'sqlite' | 'redis';
  /** Accepted writes in acceptance order. */
  readonly log: readonly StoreEntry[];
  /** The current row per resource. */
  readonly rows: ReadonlyMap<string, { token: number; payload: string | null }>;
}

/** What the clients left on one node once they had closed their engines. */
export interface NodeResidue {
  readonly node: string;
  /** Keys of the engine without an expiry (fence counters aside), or lock keys beyond the longest lease. */
  readonly lockKeys: readonly string[];
  /** Lock channels with subscribers. */
  readonly subscribers: number;
  /** Connections of the clients still open through the node's proxy. */
  readonly connections: number;
}

/** Messages a lock client writes on stdout, one JSON object per line. */
export type ClientMessage =
  | { readonly type: 'ready'; readonly pid: number }
  | { readonly type: 'op'; readonly event: OpEvent }
  /** Written just before the client stops itself (SIGSTOP) at a pause point. */
  | { readonly type: 'at'; readonly point: string; readonly section: string }
  | {
      readonly type: 'done';
      readonly section: string;
      readonly acquired: boolean;
      readonly token?: number;
      readonly slot?: number;
      readonly error?: string;
    }
  /** Answers `settle`: whether those connections are all up. */
  | { readonly type: 'settled'; readonly ready: boolean }
  | { readonly type: 'closed' };

/** Commands a lock client reads on stdin, one JSON object per line. */
export type ClientCommand =
  | {
      readonly cmd: 'loop';
      readonly workers: number;
      readonly resources: readonly string[];
      /** Every n-th section of a worker runs under `using()` and outlives its lease. Default 5. */
      readonly extendEvery?: number;
    }
  | ({ readonly cmd: 'section'; readonly section: string } & SectionOptions)
  /** Wait until the engine's connections to these nodes (indices) are up and in step. */
  | { readonly cmd: 'settle'; readonly nodes: readonly number[] }
  | { readonly cmd: 'stop' };

/** What a section holds other than a lock: a read or write hold, or a semaphore's permit. */
export type SharedKind = 'read' | 'write' | 'permit';

export interface SectionOptions {
  /** The lock, read-write lock or semaphore. */
  readonly resource: string;
  /**
   * A hold of a read-write lock (a reader reads the control counter and
   * writes nothing) or a permit of a semaphore of `permits` (its fenced key
   * is `<resource>#<slot>`, since tokens order each slot); absent: a lock.
   */
  readonly kind?: SharedKind;
  readonly permits?: number;
  /** Lease; default the client's. */
  readonly ttl?: number;
  /** Acquire retries: 0 for a single attempt. Default: retry until waitTimeout. */
  readonly attempts?: number;
  readonly waitTimeout?: number;
  /** Under `using()` with automatic extension. */
  readonly autoExtend?: boolean;
  /** How long to hold the lock before writing, in ms. */
  readonly holdMs?: number;
  /**
   * Stop this process (SIGSTOP) at this point, after announcing it:
   * `before-write` comes after the client checked that its lock is still
   * held, as a GC pause between the check and the write would.
   */
  readonly pauseAt?: 'before-write';
}
