import type { EngineContext } from './engine-context.js';
import type { LockEngine } from './lock-engine.js';
import { LockOptionsError } from './lock-errors.js';
import { describe } from './option-checks.js';
import { ReadWriteLock } from './read-write-lock.js';
import { Semaphore } from './semaphore.js';

/** What stands in for an engine and makes the primitives itself (LockService's methods). */
interface MakesPrimitives {
  readWriteLock(resource: string): ReadWriteLock;
  semaphore(name: string, permits: number): Semaphore;
}

/**
 * The nodes' side of `engine`, or, for what stands in its place (the
 * in-memory engine that `RedisLockTestingModule` provides as LockService),
 * its own method making the primitive, which is then used instead.
 */
function partsOf<K extends keyof MakesPrimitives>(
  engine: LockEngine,
  method: K,
): EngineContext | MakesPrimitives[K] {
  const { context } = engine as { context?: EngineContext };
  if (context) return context;
  const own = (engine as Partial<MakesPrimitives> | null | undefined)?.[method];
  if (typeof own === 'function') return own.bind(engine) as MakesPrimitives[K];
  throw new LockOptionsError(
    `${method}() takes a LockEngine, or the LockService Nest injects (got ${describe(engine)}).`,
  );
}

/**
 * Many readers or one writer on `resource`, over `engine`'s nodes
 * (docs/read-write-locks.md).
 */
export function readWriteLock(engine: LockEngine, resource: string): ReadWriteLock {
  const parts = partsOf(engine, 'readWriteLock');
  return typeof parts === 'function' ? parts(resource) : new ReadWriteLock(parts, resource);
}

/**
 * At most `permits` holders of `name` at once across every instance, over
 * `engine`'s nodes (docs/semaphores.md).
 */
export function semaphore(engine: LockEngine, name: string, permits: number): Semaphore {
  const parts = partsOf(engine, 'semaphore');
  return typeof parts === 'function' ? parts(name, permits) : new Semaphore(parts, name, permits);
}
