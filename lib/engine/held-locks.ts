import type { Lock } from './lock.js';

/**
 * The locks an engine granted (plain locks, read-write holds and semaphore
 * permits) and has not yet seen released or lost: what a graceful shutdown
 * waits for, and what it gives up when its time is over.
 */
export class HeldLocks {
  private readonly locks = new Set<Lock>();
  /** Resolves the drain() waiting for the last held lock. */
  private onEmpty: (() => void) | undefined;

  get size(): number {
    return this.locks.size;
  }

  add(lock: Lock): void {
    this.locks.add(lock);
  }

  /** A lock is no longer held: the last one lets a waiting drain() finish. */
  forget(lock: Lock): void {
    if (!this.locks.delete(lock) || this.locks.size > 0) return;
    const empty = this.onEmpty;
    this.onEmpty = undefined;
    empty?.();
  }

  /**
   * Waits up to `timeout` ms for the holders to release what they hold, then
   * marks every lock still held as lost (its signal aborts) and releases it.
   * A lock whose lease runs out meanwhile (or already had: a holder that
   * never released it) is lost then, and no longer waited for.
   */
  async drain(timeout: number): Promise<void> {
    for (const lock of [...this.locks]) lock.watchExpiry();
    if (this.locks.size > 0 && timeout > 0) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, timeout);
        const previous = this.onEmpty;
        this.onEmpty = () => {
          clearTimeout(timer);
          previous?.();
          resolve();
        };
      });
    }
    const left = [...this.locks];
    for (const lock of left) {
      lock.lost(
        `the lock engine shut down before its holder released it (shutdownTimeout ${timeout} ms)`,
      );
    }
    await Promise.all(left.map((lock) => lock.release()));
  }
}
