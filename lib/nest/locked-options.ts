import { LockOptionsError, type AcquireOptions } from '../engine/index.js';
import { checkMs, LOCK_DEFAULTS, resolveRetry } from '../engine/lock-options.js';
import type { LockedDefaults, LockedOptions } from './redis-lock-module-options.interface.js';

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
): AcquireOptions & { autoExtend: boolean } {
  const wait = options.wait ?? defaults.wait ?? true;
  const merged: AcquireOptions & { autoExtend: boolean } = {
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
