import type { Lock } from './lock.js';
import type { LockEngine } from './lock-engine.js';
import { renewLease } from './lease-renewal.js';

/**
 * Renews `lock`'s lease through the engine's public `extend()` until the
 * returned function is called, the lock is released, or it is lost. For
 * holders that outlive one routine (a leader's term, a minimum hold), where
 * `using()` cannot be the frame.
 */
export function keepAlive(engine: LockEngine, lock: Lock): () => void {
  const { extendThreshold, retry } = engine.options;
  return renewLease(
    lock,
    (ttl, budget) => engine.extend(lock, ttl, budget),
    extendThreshold,
    retry,
  );
}
