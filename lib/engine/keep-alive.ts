import type { Lock } from './lock.js';
import type { LockEngine } from './lock-engine.js';
import { LockLostError } from './lock-errors.js';

/** Retry an extension that found too few nodes at most this often (ms). */
const RETRY_CAP = 50;

/**
 * Renews `lock`'s lease through the engine's public `extend()` until the
 * returned function is called, the lock is released, or it is lost. For
 * holders that outlive one routine (a leader's term, a minimum hold), where
 * `using()` cannot be the frame.
 *
 * The lock's own expiry timer is armed (by reading its signal), so a lease
 * that runs out is reported by the lock itself even when this process was
 * paused past it and no extension got the chance to fail.
 */
export function keepAlive(engine: LockEngine, lock: Lock): () => void {
  const { ttl } = lock;
  const threshold = engine.options.extendThreshold;
  void lock.signal;
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  const schedule = (delay: number) => {
    if (stopped) return;
    timer = setTimeout(renew, Math.max(0, delay));
    timer.unref();
  };
  const renew = async () => {
    if (stopped || !lock.isHeld) return;
    try {
      await engine.extend(lock, ttl);
      schedule(lock.validUntil - performance.now() - ttl * threshold);
    } catch (error) {
      // extend() already marked a lock the nodes no longer hold as lost (its signal aborted).
      if (error instanceof LockLostError) return;
      // Too few nodes answered: try again while validity remains; if none is left, the lock's
      // expiry timer aborts its signal.
      const left = lock.validUntil - performance.now();
      if (left > 0) schedule(Math.min(left / 4, RETRY_CAP));
    }
  };
  schedule(lock.validUntil - performance.now() - ttl * threshold);
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
