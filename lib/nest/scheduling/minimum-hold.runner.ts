import {
  keepAlive,
  type AcquireOptions,
  type Lock,
  type LockEngine,
} from '../../engine/internal.js';

/**
 * Runs `routine` under a lock that stays taken until at least `holdAtLeast`
 * ms after its grant, even when the routine finished sooner (or threw): an
 * instance whose timer fires later then finds the tick done. The lease is
 * renewed while the routine runs (with `autoExtend`); when it returns, the
 * lease is set to end with the hold, so the hold outlives a crash of this
 * process, and the lock is released when the hold is over. Resolves with the
 * routine's result as soon as the routine returned and the hold was set.
 */
export async function runHeld<T>(
  engine: LockEngine,
  resources: readonly string[],
  options: AcquireOptions & { autoExtend: boolean },
  holdAtLeast: number,
  routine: (lock: Lock) => T | Promise<T>,
): Promise<T> {
  const { autoExtend, ...acquireOptions } = options;
  const lock = await engine.acquire(resources, acquireOptions);
  const holdEnd = performance.now() + holdAtLeast;
  const stopRenewing = autoExtend ? keepAlive(engine, lock) : undefined;
  try {
    return await routine(lock);
  } finally {
    stopRenewing?.();
    await holdUntil(engine, lock, holdEnd);
  }
}

/** Keeps `lock` on the nodes until `holdEnd` (performance.now() time), then releases it. */
async function holdUntil(engine: LockEngine, lock: Lock, holdEnd: number): Promise<void> {
  const remaining = holdEnd - performance.now();
  if (remaining <= 0 || !lock.isHeld) {
    await lock.release();
    return;
  }
  // A lease whose validity (the lease less the engine's drift allowance) covers the hold: the
  // nodes keep the key at least that long, and the release below comes after the hold.
  const ttl = Math.max(10, Math.ceil((remaining + 3) / (1 - engine.options.driftFactor)) + 1);
  try {
    await engine.extend(lock, ttl);
  } catch {
    // Lost: nothing is left to hold. Too few nodes answered: the lock is held until its
    // current validity ends, and released then.
  }
  if (!lock.isHeld) return;
  // The nodes end the hold by themselves now: a shutdown must neither wait for it nor cut it short.
  engine.leaveToExpire(lock);
  // Its holder is done with it: the lease ending is the plan, not a loss to report, however late
  // the timer below fires (it stops the lock's own watch of its lease too).
  lock.released();
  // Deletes the keys when the hold is over, and wakes the waiters, as a release does.
  const timer = setTimeout(
    () => void lock.release().catch(() => undefined),
    Math.max(0, lock.validUntil - 1 - performance.now()),
  );
  timer.unref();
}
