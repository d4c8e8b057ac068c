import type { LockedMethod, LockedRuntime } from './locked.metadata.js';
import {
  checkMs,
  LOCK_DEFAULTS,
  LockOptionsError,
  MAX_PERMITS,
  resolveRetry,
  type AcquireOptions,
  type LockBusyError,
  type LockMode,
  type RetryOptions,
} from '../../engine/internal.js';

/** Defaults of every `@Locked()` method; each decorator can override them. */
export interface LockedDefaults {
  /** Lease in ms. Default: the module's ttl (5000). */
  ttl?: number;
  /**
   * Wait for a busy lock: `true` (default) waits per the retry policy up to
   * the module's waitTimeout, a number waits up to that many ms, `false`
   * makes one attempt and fails fast (HTTP 409 with Retry-After).
   */
  wait?: boolean | number;
  /** Retry policy while waiting. Default: the module's. */
  retry?: RetryOptions;
  /** Extend the lease while the method runs. Default true. */
  autoExtend?: boolean;
}

/** Options of one `@Locked()` or `@Limited()` method, besides what to acquire. */
export interface LockedMethodOptions extends LockedDefaults {
  /**
   * What to do when the lock is held by someone else (after waiting, if
   * waiting): by default a LockBusyError is thrown, which the lock-context
   * interceptor turns into a 409 Conflict with Retry-After (or the RPC /
   * WebSocket equivalent). A function here runs instead, and what it returns
   * (or throws) becomes the method's result.
   *
   * @example
   * @Locked('report:<0>', { wait: false, onBusy: () => ({ status: 'already running' }) })
   */
  onBusy?: (error: LockBusyError, args: unknown[]) => unknown;
  /**
   * Keep the lock at least this many ms after it was granted, even when the
   * method returned sooner: the `lockAtLeastFor` of JVM schedulers. An
   * instance whose timer fires a little later (another clock, a busy event
   * loop) then finds the tick taken and skips it. The lease is still renewed
   * while the method runs; once it returns, the lease is set to end with the
   * hold, so the hold outlives a crash, and the lock is released after it.
   *
   * @example
   * @Cron('0 * * * * *')
   * @Locked('digest:<tick>', { holdAtLeast: 30_000 })
   * sendDigest() { ... }
   */
  holdAtLeast?: number;
  /**
   * The period in ms that `<tick>` counts in, for a method that no `@Cron()`
   * or `@Interval()` schedules (or to override its schedule): `<tick>` is then
   * the call's time rounded down to a multiple of it.
   */
  tick?: number;
}

/** Options of one `@Locked()` method. */
export interface LockedOptions extends LockedMethodOptions {
  /**
   * Take the resource's read-write lock instead of its exclusive lock: any
   * number of `'read'` holds run together, a `'write'` hold runs alone (see
   * docs/read-write-locks.md). One resource only. Default: the exclusive lock.
   *
   * @example
   * @Locked('catalogue', { mode: 'read' })
   * async list() { ... }
   */
  mode?: LockMode;
}

/** Options of one `@Limited()` method: how many runs at once, and `@Locked()`'s options. */
export interface LimitedOptions extends LockedMethodOptions {
  /** How many runs may hold a permit at once across every instance: a whole number from 1 to MAX_PERMITS. */
  permits: number;
}

/** The acquisition options of one method: its own over the module's defaults. */
export type MergedLockedOptions = AcquireOptions & { autoExtend: boolean };

const DEFAULTS = ['ttl', 'wait', 'retry', 'autoExtend'];
/** Options of one method only, never module defaults. */
const METHOD_ONLY = ['onBusy', 'holdAtLeast', 'tick'];
/** What each decorator takes besides, and the module's defaults (`false`). */
const OWN = { Locked: ['mode'], Limited: ['permits'] };

/**
 * Checks the options of a decorated method (`forMethod`: true or 'Locked'
 * for `@Locked()`, 'Limited' for `@Limited()`), or the module's `locked`
 * defaults (`false`), where they are written.
 */
export function checkLockedOptions(
  where: string,
  options: unknown,
  forMethod: boolean | keyof typeof OWN = true,
): LockedOptions & Partial<LimitedOptions> {
  const decorator = forMethod === true ? 'Locked' : forMethod;
  if (options === undefined) {
    if (decorator === 'Limited') throw permitsError(where, undefined);
    return {};
  }
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw new LockOptionsError(
      `${where}: options must be an object such as { ttl: 5000, wait: false }.`,
    );
  }
  const o = options as Record<string, unknown>;
  const known = decorator ? [...DEFAULTS, ...METHOD_ONLY, ...OWN[decorator]] : DEFAULTS;
  for (const key of Object.keys(o)) {
    if (!known.includes(key)) {
      throw new LockOptionsError(
        `${where} has no option '${key}'; the options are: ${known.join(', ')}.`,
      );
    }
  }
  if (o.mode !== undefined && o.mode !== 'read' && o.mode !== 'write') {
    throw new LockOptionsError(
      `${where}: mode is 'read' (shared with other readers) or 'write' (alone), got ${describeValue(o.mode)}; ` +
        'leave it out for the exclusive lock.',
    );
  }
  if (decorator === 'Limited') {
    const { permits } = o;
    if (
      typeof permits !== 'number' ||
      !Number.isInteger(permits) ||
      permits < 1 ||
      permits > MAX_PERMITS
    )
      throw permitsError(where, permits);
  }
  if (o.ttl !== undefined) checkMs(`${where}: ttl`, o.ttl, 10);
  if (o.wait !== undefined && typeof o.wait !== 'boolean')
    checkMs(`${where}: wait (true, false or a number of ms)`, o.wait, 0);
  if (o.retry !== undefined) resolveRetry(`${where}: retry`, o.retry, LOCK_DEFAULTS.retry);
  if (o.autoExtend !== undefined && typeof o.autoExtend !== 'boolean') {
    throw new LockOptionsError(`${where}: autoExtend must be true or false.`);
  }
  if (o.onBusy !== undefined && typeof o.onBusy !== 'function') {
    throw new LockOptionsError(`${where}: onBusy must be a function (error, args) => result.`);
  }
  if (o.holdAtLeast !== undefined) checkMs(`${where}: holdAtLeast`, o.holdAtLeast, 1);
  if (o.tick !== undefined) checkMs(`${where}: tick`, o.tick, 1);
  return o as LockedOptions & Partial<LimitedOptions>;
}

function permitsError(where: string, permits: unknown): LockOptionsError {
  return new LockOptionsError(
    `${where}: permits is how many runs may go at once, a whole number from 1 to ${MAX_PERMITS} ` +
      `(got ${describeValue(permits)}); write e.g. { permits: 2 }.`,
  );
}

function describeValue(value: unknown): string {
  return typeof value === 'string' ? `'${value}'` : value === undefined ? 'nothing' : String(value);
}

/** The acquisition options of one decorated method, its own options over the module's defaults. */
export function mergeLockedOptions(
  options: LockedOptions,
  defaults: LockedDefaults,
): MergedLockedOptions {
  const wait = options.wait ?? defaults.wait ?? true;
  const merged: MergedLockedOptions = {
    autoExtend: options.autoExtend ?? defaults.autoExtend ?? true,
  };
  const ttl = options.ttl ?? defaults.ttl;
  if (ttl !== undefined) merged.ttl = ttl;
  const retry = options.retry ?? defaults.retry;
  if (wait === false) merged.retry = { attempts: 0 };
  else if (retry !== undefined) merged.retry = retry;
  if (typeof wait === 'number') merged.waitTimeout = wait;
  return merged;
}

/**
 * The method's options over the module's defaults, merged once per application's defaults.
 * A scheduled job does not wait by default: a lock held means another instance runs this tick,
 * and waiting for it would run the tick a second time.
 */
export function optionsOf(method: LockedMethod, runtime: LockedRuntime): MergedLockedOptions {
  const cached = method.merged;
  if (cached?.defaults === runtime.defaults) return cached.options;
  const own =
    method.schedule && method.options.wait === undefined
      ? { ...method.options, wait: false }
      : method.options;
  const options = mergeLockedOptions(own, runtime.defaults);
  method.merged = { defaults: runtime.defaults, options };
  return options;
}
