import type { Cluster, ClusterOptions, Redis, RedisOptions } from 'ioredis';
import { LockOptionsError } from './lock-errors.js';
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

const consoleLogger: LockLogger = {
  warn: (m) => console.warn(`[redis-lock] ${m}`),
  error: (m) => console.error(`[redis-lock] ${m}`),
};

/**
 * Every option, named once per type: `satisfies` fails to compile when an
 * option is added to (or removed from) the type without this list.
 */
const ENGINE_OPTION_KEYS = {
  nodes: true,
  keyPrefix: true,
  ttl: true,
  nodeTimeout: true,
  driftFactor: true,
  waitTimeout: true,
  unavailableTimeout: true,
  shutdownTimeout: true,
  retry: true,
  fencing: true,
  fenceCounter: true,
  fenceCounterTtl: true,
  extendThreshold: true,
  releaseNotifications: true,
  strict: true,
  checkNodes: true,
  logger: true,
} satisfies Record<keyof LockEngineOptions, true>;
const RETRY_OPTION_KEYS = {
  attempts: true,
  delay: true,
  factor: true,
  maxDelay: true,
  jitter: true,
} satisfies Record<keyof RetryOptions, true>;

const KNOWN_ENGINE_KEYS: ReadonlySet<string> = new Set(Object.keys(ENGINE_OPTION_KEYS));
const KNOWN_RETRY_KEYS: ReadonlySet<string> = new Set(Object.keys(RETRY_OPTION_KEYS));

function fail(message: string): never {
  throw new LockOptionsError(message);
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null;
}

function describe(value: unknown): string {
  if (typeof value === 'string') return `'${value}'`;
  if (typeof value === 'number' || typeof value === 'boolean' || value == null)
    return String(value);
  if (Array.isArray(value)) return 'an array';
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`;
}

function rejectUnknownKeys(
  where: string,
  value: Record<string, unknown>,
  known: ReadonlySet<string>,
  alsoKnown: readonly string[] = [],
): void {
  for (const key of Object.keys(value)) {
    if (!known.has(key) && !alsoKnown.includes(key) && value[key] !== undefined) {
      fail(
        `${where} has no option '${key}'; the options are: ${[...known, ...alsoKnown].join(', ')}.`,
      );
    }
  }
}

/**
 * Refuses keys that are neither engine options nor `moduleKeys` (the options
 * a framework layer reads itself), naming them all in the message.
 */
export function rejectUnknownOptions(
  where: string,
  options: unknown,
  moduleKeys: readonly string[],
): void {
  if (isObject(options)) rejectUnknownKeys(where, options, KNOWN_ENGINE_KEYS, moduleKeys);
}

/** A whole number of milliseconds within [min, max]. */
export function checkMs(name: string, value: unknown, min: number, max = MAX_TIMER_MS): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    fail(
      `${name} must be a whole number of milliseconds from ${min} to ${max} (got ${describe(value)}).`,
    );
  }
  return value;
}

/** The longest delay a Node.js timer keeps (about 24.8 days); longer ones fire at once. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

function checkFraction(
  name: string,
  value: unknown,
  min: number,
  max: number,
  hint: string,
): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < min || value > max) {
    fail(`${name} must be a number from ${min} to ${max} (got ${describe(value)}); ${hint}.`);
  }
  return value;
}

function checkBoolean(name: string, value: unknown): boolean {
  if (typeof value !== 'boolean') fail(`${name} must be true or false (got ${describe(value)}).`);
  return value;
}

export function resolveRetry(where: string, retry: unknown, base: ResolvedRetry): ResolvedRetry {
  if (retry === undefined) return base;
  if (!isObject(retry))
    fail(`${where} must be an object such as { attempts: 5, delay: 10 } (got ${describe(retry)}).`);
  rejectUnknownKeys(where, retry, KNOWN_RETRY_KEYS);
  const attempts = retry.attempts ?? base.attempts;
  if (
    attempts !== Infinity &&
    (typeof attempts !== 'number' || !Number.isInteger(attempts) || attempts < 0)
  ) {
    fail(
      `${where}.attempts must be a whole number from 0, or Infinity (got ${describe(attempts)}).`,
    );
  }
  const resolved = {
    attempts,
    delay: checkMs(`${where}.delay`, retry.delay ?? base.delay, 0),
    factor: checkFraction(
      `${where}.factor`,
      retry.factor ?? base.factor,
      1,
      100,
      'use 1 for a constant delay',
    ),
    maxDelay: checkMs(`${where}.maxDelay`, retry.maxDelay ?? base.maxDelay, 0),
    jitter: checkFraction(
      `${where}.jitter`,
      retry.jitter ?? base.jitter,
      0,
      1,
      'use 0 for no randomness',
    ),
  };
  if (resolved.maxDelay < resolved.delay) {
    fail(
      `${where}.maxDelay (${resolved.maxDelay}) must not be smaller than ${where}.delay (${resolved.delay}).`,
    );
  }
  return Object.freeze(resolved);
}

/** True for an ioredis client, `Redis` or `Cluster` (or one that quacks like it). */
export function isRedisClient(value: unknown): value is Redis {
  return isObject(value) && typeof value.evalsha === 'function' && typeof value.status === 'string';
}

/** True for an ioredis `Cluster` client. */
export function isClusterClient(value: unknown): value is Cluster {
  return isRedisClient(value) && (value as unknown as { isCluster?: unknown }).isCluster === true;
}

/** True for `{ cluster: [...] }`, the options of a cluster the engine opens. */
export function isClusterSpec(value: unknown): value is ClusterNodeSpec {
  return isObject(value) && !isRedisClient(value) && 'cluster' in value;
}

const CLUSTER_EXAMPLE =
  "{ cluster: [{ host: '10.0.0.1', port: 7000 }], options: { redisOptions: { password } } }";
const SENTINEL_EXAMPLE = "{ sentinels: [{ host: '10.0.0.1', port: 26379 }], name: 'mymaster' }";

function isPort(value: unknown): boolean {
  return typeof value === 'number' && Number.isInteger(value) && value > 0 && value <= 65535;
}

function checkUrl(where: string, spec: string): void {
  let url: URL;
  try {
    url = new URL(spec);
  } catch {
    fail(`${where} is not a URL; write it as redis://host:6379 or rediss://host:6380 for TLS.`);
  }
  if (url.protocol !== 'redis:' && url.protocol !== 'rediss:') {
    fail(`${where} uses '${url.protocol}'; use redis:// or rediss:// (TLS).`);
  }
  try {
    decodeURIComponent(url.username);
    decodeURIComponent(url.password);
  } catch {
    fail(
      `${where} has a malformed %-escape in its user name or password; percent-encode them as UTF-8.`,
    );
  }
  if (url.searchParams.has('sentinels') || url.searchParams.has('name')) {
    fail(
      `${where}: Sentinel settings do not go in a URL; give { sentinels: [{ host, port }], name: 'mymaster' }.`,
    );
  }
}

function checkClusterSpec(where: string, spec: Record<string, unknown>): void {
  for (const key of Object.keys(spec)) {
    if (key !== 'cluster' && key !== 'options' && spec[key] !== undefined) {
      fail(
        `${where} is a cluster and takes only 'cluster' (the seed nodes) and 'options' (ioredis Cluster options), ` +
          `not '${key}'; connection settings go in options.redisOptions, e.g. ${CLUSTER_EXAMPLE}.`,
      );
    }
  }
  const seeds = spec.cluster;
  if (!Array.isArray(seeds) || seeds.length === 0) {
    fail(
      `${where}.cluster must list one or more seed nodes of the cluster, e.g. ${CLUSTER_EXAMPLE} (got ${describe(seeds)}).`,
    );
  }
  seeds.forEach((seed: unknown, i) => {
    const at = `${where}.cluster[${i}]`;
    if (typeof seed === 'string') return checkUrl(at, seed);
    if (
      !isObject(seed) ||
      !isPort(seed.port) ||
      (seed.host !== undefined && typeof seed.host !== 'string')
    ) {
      fail(
        `${at} must be a redis://host:port URL or { host, port } with a TCP port number (got ${describe(seed)}).`,
      );
    }
  });
  if (spec.options !== undefined && (!isObject(spec.options) || Array.isArray(spec.options))) {
    fail(
      `${where}.options must be ioredis Cluster options such as { redisOptions: { password } } (got ${describe(spec.options)}).`,
    );
  }
}

function checkSentinelSpec(where: string, spec: Record<string, unknown>): void {
  const { sentinels, name } = spec;
  if (
    !Array.isArray(sentinels) ||
    sentinels.length === 0 ||
    !sentinels.every((s: unknown) => isObject(s) && (s.port === undefined || isPort(s.port)))
  ) {
    fail(
      `${where}.sentinels must list the Sentinels as { host, port } objects, e.g. ${SENTINEL_EXAMPLE} (got ${describe(sentinels)}).`,
    );
  }
  if (typeof name !== 'string' || name.length === 0) {
    fail(
      `${where} reaches its master through Sentinel: also give the master's name as Sentinel knows it, e.g. ${SENTINEL_EXAMPLE}.`,
    );
  }
}

function checkNodeSpec(spec: unknown, index: number): void {
  const where = `nodes[${index}]`;
  if (typeof spec === 'string') return checkUrl(where, spec);
  if (isRedisClient(spec)) return;
  if (isObject(spec) && !Array.isArray(spec)) {
    if ('cluster' in spec) return checkClusterSpec(where, spec);
    if ('clusters' in spec || 'startupNodes' in spec) {
      fail(`${where}: write a Redis Cluster as ${CLUSTER_EXAMPLE}.`);
    }
    if (spec.port !== undefined && !isPort(spec.port)) {
      fail(`${where}.port must be a TCP port number (got ${describe(spec.port)}).`);
    }
    if ('sentinels' in spec) return checkSentinelSpec(where, spec);
    if (spec.host === undefined && spec.port === undefined && spec.path === undefined) {
      fail(`${where} names no server; give { host, port } (or a redis:// URL).`);
    }
    return;
  }
  fail(
    `${where} must be a redis:// URL, ioredis options ({ host, port, ... } or { sentinels, name }), ` +
      `a cluster (${CLUSTER_EXAMPLE}) or an ioredis client (got ${describe(spec)}).`,
  );
}

function checkFenceCounter(value: unknown): 'node' | 'resource' {
  if (value === 'node' || value === 'resource') return value;
  return fail(
    `fenceCounter must be 'node' (one counter per node, the default) or 'resource' (one per resource) (got ${describe(value)}).`,
  );
}

function checkFenceCounterTtl(value: unknown): number {
  if (value === 0) return 0;
  return checkMs(
    'fenceCounterTtl (0 keeps counters forever)',
    value,
    60_000,
    Number.MAX_SAFE_INTEGER,
  );
}

/** Validates the engine options once and merges the defaults. */
export function resolveEngineOptions(options: unknown): ResolvedEngineOptions {
  if (!isObject(options))
    fail('Lock options must be an object such as { nodes: ["redis://localhost:6379"] }.');
  rejectUnknownKeys('Lock options', options, KNOWN_ENGINE_KEYS);
  const { nodes } = options;
  if (typeof nodes === 'string') {
    const parts = nodes
      .split(',')
      .map((part) => part.trim())
      .filter(Boolean);
    fail(
      `nodes must be an array with one entry per Redis node, not one string (got ${describe(nodes)}). ` +
        `Write nodes: ${JSON.stringify(parts.length > 0 ? parts : ['redis://localhost:6379'])}` +
        (parts.length > 1 ? ", or split a comma-separated setting: nodes: value.split(',')." : '.'),
    );
  }
  if (!Array.isArray(nodes) || nodes.length === 0) {
    fail('nodes must list at least one Redis node, e.g. nodes: ["redis://localhost:6379"].');
  }
  nodes.forEach(checkNodeSpec);
  const keyPrefix = options.keyPrefix ?? LOCK_DEFAULTS.keyPrefix;
  if (typeof keyPrefix !== 'string' || /[{}]/.test(keyPrefix)) {
    fail(`keyPrefix must be a string without '{' or '}' (got ${describe(keyPrefix)}).`);
  }
  const ttl = checkMs('ttl', options.ttl ?? LOCK_DEFAULTS.ttl, 10);
  const nodeTimeout =
    options.nodeTimeout === undefined
      ? undefined
      : checkMs('nodeTimeout', options.nodeTimeout, 1, Math.floor(ttl / 2));
  const logger = options.logger ?? consoleLogger;
  if (
    !isObject(logger) ||
    typeof logger.warn !== 'function' ||
    typeof logger.error !== 'function'
  ) {
    fail(
      'logger must have warn(message) and error(message) methods (a Nest Logger or console work).',
    );
  }
  return Object.freeze({
    nodes: Object.freeze([...(nodes as LockNodeSpec[])]),
    keyPrefix,
    ttl,
    nodeTimeout,
    driftFactor: checkFraction(
      'driftFactor',
      options.driftFactor ?? LOCK_DEFAULTS.driftFactor,
      0,
      0.5,
      'the usual value is 0.01',
    ),
    waitTimeout: checkMs('waitTimeout', options.waitTimeout ?? LOCK_DEFAULTS.waitTimeout, 0),
    unavailableTimeout: checkMs(
      'unavailableTimeout',
      options.unavailableTimeout ?? LOCK_DEFAULTS.unavailableTimeout,
      0,
    ),
    shutdownTimeout: checkMs(
      'shutdownTimeout',
      options.shutdownTimeout ?? LOCK_DEFAULTS.shutdownTimeout,
      0,
    ),
    retry: resolveRetry('retry', options.retry, LOCK_DEFAULTS.retry),
    fencing: checkBoolean('fencing', options.fencing ?? LOCK_DEFAULTS.fencing),
    fenceCounter: checkFenceCounter(options.fenceCounter ?? LOCK_DEFAULTS.fenceCounter),
    fenceCounterTtl: checkFenceCounterTtl(options.fenceCounterTtl ?? LOCK_DEFAULTS.fenceCounterTtl),
    extendThreshold: checkFraction(
      'extendThreshold',
      options.extendThreshold ?? LOCK_DEFAULTS.extendThreshold,
      0.1,
      0.9,
      'it is the fraction of the lease left when an extension starts',
    ),
    releaseNotifications: checkBoolean(
      'releaseNotifications',
      options.releaseNotifications ?? LOCK_DEFAULTS.releaseNotifications,
    ),
    strict: checkBoolean('strict', options.strict ?? LOCK_DEFAULTS.strict),
    checkNodes: checkBoolean('checkNodes', options.checkNodes ?? LOCK_DEFAULTS.checkNodes),
    logger: logger as unknown as LockLogger,
  });
}
