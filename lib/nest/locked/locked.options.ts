import type { LockedMethod, LockedRuntime } from './locked.metadata.js';
import {
  checkMs,
  LOCK_DEFAULTS,
  LockOptionsError,
  resolveRetry,
  type AcquireOptions,
  type LockBusyError,
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

/** Options of one `@Locked()` method. */
export interface LockedOptions extends LockedDefaults {
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

/** The acquisition options of one method: its own over the module's defaults. */
export type MergedLockedOptions = AcquireOptions & { autoExtend: boolean };

const KNOWN = new Set(['ttl', 'wait', 'retry', 'autoExtend', 'onBusy', 'holdAtLeast', 'tick']);
/** Options of one method only, never module defaults. */
const METHOD_ONLY = new Set(['onBusy', 'holdAtLeast', 'tick']);

/** Checks the options of `@Locked()` (or the module's `locked` defaults) where they are written. */
export function checkLockedOptions(
  where: string,
  options: unknown,
  allowOnBusy = true,
): LockedOptions {
  if (options === undefined) return {};
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw new LockOptionsError(
      `${where}: options must be an object such as { ttl: 5000, wait: false }.`,
    );
  }
  const o = options as Record<string, unknown>;
  for (const key of Object.keys(o)) {
    if (!KNOWN.has(key) || (METHOD_ONLY.has(key) && !allowOnBusy)) {
      throw new LockOptionsError(
        `${where} has no option '${key}'; the options are: ${[...KNOWN].filter((k) => allowOnBusy || !METHOD_ONLY.has(k)).join(', ')}.`,
      );
    }
  }
  if (o.ttl !== undefined) checkMs(`${where}: ttl`, o.ttl, 10);
  if (o.wait !== undefined && typeof o.wait !== 'boolean') checkMs(`${where}: wait`, o.wait, 0);
  if (o.retry !== undefined) resolveRetry(`${where}: retry`, o.retry, LOCK_DEFAULTS.retry);
  if (o.autoExtend !== undefined && typeof o.autoExtend !== 'boolean') {
    throw new LockOptionsError(`${where}: autoExtend must be true or false.`);
  }
  if (o.onBusy !== undefined && typeof o.onBusy !== 'function') {
    throw new LockOptionsError(`${where}: onBusy must be a function (error, args) => result.`);
  }
  if (o.holdAtLeast !== undefined) checkMs(`${where}: holdAtLeast`, o.holdAtLeast, 1);
  if (o.tick !== undefined) checkMs(`${where}: tick`, o.tick, 1);
  return o as LockedOptions;
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
