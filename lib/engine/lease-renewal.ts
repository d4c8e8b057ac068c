import type { Lock } from './lock.js';
import { LockLostError } from './lock-errors.js';
import type { ResolvedRetry } from './lock-options.js';
import { retryDelay } from './retry-delay.js';

/**
 * Keeps `lock`'s lease renewed until the returned function is called, the
 * lock is released, or it is lost: an extension when `threshold` of the lease
 * is left; after a failed one (too few nodes answered), another try while
 * validity remains. The last extension must end, and the signal abort, a
 * small margin before the lease does, so the holder learns of the loss
 * before anyone else can be granted the lock.
 *
 * `extend(ttl, budget)` is the owner's extension with that time budget. Also
 * arms the lock's own expiry timer (by reading its signal), so a lease that
 * runs out is reported even when this process was paused past it and no
 * extension got the chance to fail.
 */
export function renewLease(
  lock: Lock,
  extend: (ttl: number, budget: number) => Promise<unknown>,
  threshold: number,
  retry: ResolvedRetry,
): () => void {
  const { ttl } = lock;
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
  void lock.signal;
  schedule(lock.validUntil - performance.now() - ttl * threshold);
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
