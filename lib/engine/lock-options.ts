import type { Cluster, ClusterOptions, Redis, RedisOptions } from 'ioredis';
import type { ReleaseResult } from './lock.js';

/**
 * A Redis Cluster as ONE lock node: the engine opens an ioredis `Cluster`
 * from these seed nodes (the others are discovered) and closes it on close.
 *
 * @example
 * { cluster: ['redis://10.0.0.1:7000', { host: '10.0.0.2', port: 7000 }], options: { redisOptions: { password } } }
 */
export interface ClusterNodeSpec {
  /**
   * Seed nodes: `redis://host:port` URLs (`rediss://` for TLS) or
   * `{ host, port }`. Credentials and TLS in a URL apply to every node of the
   * cluster, as do `options.redisOptions`.
   */
  readonly cluster: readonly (string | { readonly host?: string; readonly port: number })[];
  /** ioredis Cluster options (`redisOptions`, `natMap`, `slotsRefreshTimeout`, ...). */
  readonly options?: ClusterOptions;
}

/**
 * One independent lock node, in one of these forms:
 * - a URL: `redis://user:pass@host:6379/0` (`rediss://` for TLS);
 * - ioredis connection options: `{ host, port, password, ... }`, or a
 *   Sentinel-managed master: `{ sentinels: [{ host, port: 26379 }], name: 'mymaster' }`;
 * - a Redis Cluster: `{ cluster: [seed nodes], options? }` ({@link ClusterNodeSpec});
 * - an ioredis client you already own (`Redis`, including one reaching its
 *   master through Sentinel, or `Cluster`): the engine never closes it.
 *
 * A Cluster or a Sentinel-managed master counts as one node in the quorum.
 */
export type LockNodeSpec = string | RedisOptions | ClusterNodeSpec | Redis | Cluster;

/** Where warnings about unsafe node set-ups and failed releases go. */
export interface LockLogger {
  warn(message: string): void;
  error(message: string): void;
  debug?(message: string): void;
}

/**
 * How to wait for a busy lock: exponential backoff with jitter, bounded by
 * `attempts` and by the caller's `waitTimeout`.
 */
export interface RetryOptions {
  /** Retries after the first attempt. Default: unbounded (the wait deadline ends it). */
  attempts?: number;
  /** First delay in ms. Default 10. */
  delay?: number;
  /** Growth per retry. Default 5 (10 ms, 50 ms, 250 ms, capped by maxDelay). */
  factor?: number;
  /** Largest delay in ms. Default 200. */
  maxDelay?: number;
  /** Random spread as a fraction of the delay, 0 to 1. Default 0.5 (±50 %). */
  jitter?: number;
}

/** Options of a single acquisition; each defaults to the engine's options. */
export interface AcquireOptions {
  /** Lease in ms. Default 5000. */
  ttl?: number;
  /** Give up waiting after this many ms (measured from the first attempt). Default 10000. */
  waitTimeout?: number;
  retry?: RetryOptions;
  /** Stop waiting when this signal aborts (throws `LockAbortedError`). */
  signal?: AbortSignal;
  /**
   * How long to keep trying while too few nodes answer (an outage, not a
   * busy lock), in ms from the first such attempt in a row; then the
   * acquisition fails with `LockUnavailableError`, however long `waitTimeout`
   * would wait for a busy lock. Default 1000.
   */
  unavailableTimeout?: number;
}

/**
 * Options of `tryAcquire()`: one attempt, so nothing about waiting or
 * retrying (`waitTimeout`, `retry` and `unavailableTimeout` are refused:
 * call `acquire()` to wait).
 */
export type TryAcquireOptions = Pick<AcquireOptions, 'ttl' | 'signal'>;

/** Options of `using()`: an acquisition plus automatic extension. */
export interface UsingOptions extends AcquireOptions {
  /**
   * Extend the lease while the routine runs. Default true. When an extension
   * cannot be had, the lock's signal is aborted with `LockLostError` before
   * the lease ends.
   */
  autoExtend?: boolean;
  /**
   * Told what the final release found (`using()` never throws over it, and
   * returns the routine's result): for logs or metrics of releases that
   * missed nodes or found the lock expired.
   */
  onReleased?: (result: ReleaseResult) => void;
}

export interface LockEngineOptions {
  /**
   * The independent nodes; a lock needs floor(n/2)+1 of them. A Redis Cluster
   * or a Sentinel-managed master counts as one node (see {@link LockNodeSpec}).
   */
  nodes: readonly LockNodeSpec[];
  /** Prefix of every key the engine writes. Default `'lock:'`. */
  keyPrefix?: string;
  /** Default lease in ms. Default 5000: short, and extended while work runs. */
  ttl?: number;
  /** How long to wait for one node's answer, in ms. Default ttl / 10. */
  nodeTimeout?: number;
  /** Clock drift allowance as a fraction of ttl (plus 2 ms). Default 0.01. */
  driftFactor?: number;
  /** Default wait deadline of `acquire()` in ms. Default 10000. */
  waitTimeout?: number;
  /**
   * How long an acquisition keeps trying while too few nodes answer (an
   * outage), in ms; independent of `waitTimeout`, which is for busy locks.
   * Default 1000.
   */
  unavailableTimeout?: number;
  /**
   * How long `close()` (and the application's shutdown) waits for the locks
   * in flight to be released before it aborts their signals and releases
   * them itself, in ms. Default 10000.
   */
  shutdownTimeout?: number;
  retry?: RetryOptions;
  /** Issue fencing tokens with every grant. Default true. */
  fencing?: boolean;
  /**
   * Where a node counts fencing tokens. `'node'` (the default): one counter
   * per node (`<keyPrefix>fence`) that every grant on the node raises, so a
   * token is above every earlier token of that node, whatever the resource:
   * no key per resource and nothing to expire, the cheapest. `'resource'`: a
   * counter per resource (`<lock key>:fence`, living `fenceCounterTtl`), with
   * tokens that count each resource's grants. A Redis Cluster node always
   * counts per resource: a script cannot reach a key in another slot.
   */
  fenceCounter?: 'node' | 'resource';
  /**
   * Lifetime in ms of a resource's fence counter on a node, so that counters
   * for resources no longer locked do not pile up. A counter created after
   * the last one expired starts from the wall clock (ms × 1024), above every
   * earlier token; this assumes the app instances' clocks differ by much
   * less than this. Default 3,600,000 (1 hour). 0 keeps counters forever and
   * counts from 1 (small exact tokens; memory grows with distinct resources,
   * and a node that lost its data must be re-seeded).
   */
  fenceCounterTtl?: number;
  /**
   * Extend when this fraction of the lease remains (auto-extension).
   * Default 0.5.
   */
  extendThreshold?: number;
  /**
   * Publish a message when a lock is released, and listen for them while
   * waiting, so a waiter takes a freed lock within about one round trip
   * instead of a retry delay. Default true. Waiters also queue up within a
   * process, first come first served, either way.
   */
  releaseNotifications?: boolean;
  /** Refuse to connect when a node's set-up is unsafe, instead of warning. Default false. */
  strict?: boolean;
  /** Run the safety checks of the nodes' configuration on connect. Default true. */
  checkNodes?: boolean;
  logger?: LockLogger;
}

export interface ResolvedRetry {
  readonly attempts: number;
  readonly delay: number;
  readonly factor: number;
  readonly maxDelay: number;
  readonly jitter: number;
}

export interface ResolvedEngineOptions {
  readonly nodes: readonly LockNodeSpec[];
  readonly keyPrefix: string;
  readonly ttl: number;
  /** Undefined: derived from each call's ttl. */
  readonly nodeTimeout: number | undefined;
  readonly driftFactor: number;
  readonly waitTimeout: number;
  readonly unavailableTimeout: number;
  readonly shutdownTimeout: number;
  readonly retry: ResolvedRetry;
  readonly fencing: boolean;
  readonly fenceCounter: 'node' | 'resource';
  readonly fenceCounterTtl: number;
  readonly extendThreshold: number;
  readonly releaseNotifications: boolean;
  readonly strict: boolean;
  readonly checkNodes: boolean;
  readonly logger: LockLogger;
}

/** The defaults, in one place. */
export const LOCK_DEFAULTS = Object.freeze({
  keyPrefix: 'lock:',
  ttl: 5000,
  driftFactor: 0.01,
  waitTimeout: 10_000,
  unavailableTimeout: 1000,
  shutdownTimeout: 10_000,
  retry: Object.freeze({ attempts: Infinity, delay: 10, factor: 5, maxDelay: 200, jitter: 0.5 }),
  fencing: true,
  fenceCounter: 'node' as 'node' | 'resource',
  fenceCounterTtl: 3_600_000,
  extendThreshold: 0.5,
  releaseNotifications: true,
  strict: false,
  checkNodes: true,
});
