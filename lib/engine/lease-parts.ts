import type { LockEngine } from './lock-engine.js';
import { ReadWriteLock } from './read-write-lock.js';
import { Semaphore } from './semaphore.js';

/**
 * Many readers or one writer on `resource`, over `engine`'s nodes
 * (docs/read-write-locks.md).
 */
export function readWriteLock(engine: LockEngine, resource: string): ReadWriteLock {
  return new ReadWriteLock(engine.context, resource);
}

/**
 * At most `permits` holders of `name` at once across every instance, over
 * `engine`'s nodes (docs/semaphores.md).
 */
export function semaphore(engine: LockEngine, name: string, permits: number): Semaphore {
  return new Semaphore(engine.context, name, permits);
}
