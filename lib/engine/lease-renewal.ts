import type { Lock } from './lock.js';
import { LockLostError } from './lock-errors.js';
import type { ResolvedRetry, UsingOptions } from './lock-options.js';
import { retryDelay } from './retry-delay.js';

/** An engine's renewal settings: when to extend, and how soon to try again after a failure. */
export interface RenewalSettings {
  readonly extendThreshold: number;
  readonly retry: ResolvedRetry;
}

/** The extension of one lock: a new ttl, within a time budget (ms). */
export type Extension = (ttl: number, budget: number) => Promise<unknown>;

/** What keeps a lock of its own renewed: its extend() and its settings (every engine has both). */
export interface LeaseKeeper {
  readonly options: RenewalSettings;
  extend(lock: Lock, ttl?: number, timeout?: number): Promise<Lock>;
}

/**
 * Keeps `lock`'s lease renewed until the returned function is called, the
 * lock is released, or it is lost: an extension when `extendThreshold` of the
 * lease is left; after a failed one (too few nodes answered), another try
 * while validity remains. The last extension must end, and the signal abort, a
 * small margin before the lease does, so the holder learns of the loss
 * before anyone else can be granted the lock.
 *
 * Also arms the lock's own expiry timer (without creating its signal, which
 * a holder that never reads it does not pay for), so a lease that runs out is
 * reported even when this process was paused past it and no extension got
 * the chance to fail.
 */
export function renewLease(lock: Lock, extend: Extension, settings: RenewalSettings): () => void {
  const { ttl } = lock;
  const { extendThreshold: threshold, retry } = settings;
  const margin = Math.max(2, Math.ceil(ttl * 0.02));
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  const schedule = (delay: number) => {
    if (stopped) return;
    timer = setTimeout(renew, Math.max(0, delay));
    timer.unref();
  };
  const renew = async () => {
    if (stopped || !lock.isHeld) return;
    const budget = lock.validUntil - margin - performance.now();
    if (budget <= 0) return lock.lost('it could not be extended before its lease ran out');
    try {
      await extend(ttl, budget);
      schedule(lock.validUntil - performance.now() - ttl * threshold);
    } catch (error) {
      // extend() already marked a lock the nodes no longer hold as lost (its signal aborted).
      if (stopped || error instanceof LockLostError) return;
      const left = lock.validUntil - margin - performance.now();
      if (left <= 0) {
        lock.lost(
          `it could not be extended before its lease ran out (${(error as Error).message})`,
        );
      } else {
        schedule(Math.min(left / 4, retryDelay(retry, 1)));
      }
    }
  };
  lock.watchExpiry();
  schedule(lock.validUntil - performance.now() - ttl * threshold);
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

/**
 * Renews `lock`'s lease through its engine's `extend()` until the returned
 * function is called, the lock is released, or it is lost. For holders that
 * outlive one routine (a leader's term, a minimum hold), where `using()`
 * cannot be the frame.
 */
export function keepAlive(engine: LeaseKeeper, lock: Lock): () => void {
  return renewLease(lock, (ttl, budget) => engine.extend(lock, ttl, budget), engine.options);
}

/**
 * The frame of every `using()`: runs `routine` with `lock`, renewing its
 * lease meanwhile (unless `autoExtend` is false), and always releases it,
 * reporting the release's result to `onReleased`. A failed release never
 * hides the routine's own result or error.
 */
export async function holdWhile<T>(
  lock: Lock,
  extend: Extension,
  settings: RenewalSettings,
  routine: (lock: Lock) => T | Promise<T>,
  options: Pick<UsingOptions, 'autoExtend' | 'onReleased'>,
): Promise<T> {
  if (options.autoExtend !== false) lock.stopExtending = renewLease(lock, extend, settings);
  try {
    return await routine(lock);
  } finally {
    const result = await lock.release();
    options.onReleased?.(result);
  }
}
