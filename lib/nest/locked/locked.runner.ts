import {
  LockEngine,
  LockOptionsError,
  readWriteLock,
  semaphore,
  type Lock,
  type ReadWriteLock,
  type Semaphore,
  type UsingOptions,
} from '../../engine/index.js';
import { holdKindOf, lockOf, lockStorage, type LockFrame } from '../context/lock-context.js';
import { markLockFailure } from '../context/lock-failures.js';
import { noTickError } from '../scheduling/job-schedule.js';
import { LockEngineUnsupportedError, LockKeyError } from './locked.errors.js';
import type { LockedHoldKind, LockedMethod } from './locked.metadata.js';

// What the three runners (locked-call, locked-stream, locked-subscription) share: the plan of
// one call, and the frame its method runs in.

/** What one call does before running the method: which lock to take, or reuse. */
export interface Plan {
  /** The frame the call was made in. */
  readonly frame: LockFrame | undefined;
  /** Resources not yet held by this call chain. */
  readonly missing: readonly string[];
  /** The lock already held, when every resource is (re-entrant call). */
  readonly reused: Lock | undefined;
  /** The tick `<tick>` stood for. */
  readonly tick?: number;
}

/** Throws LockKeyError (marked as a lock failure) for arguments that make no key. */
export function plan(method: LockedMethod, engine: LockEngine, args: unknown[]): Plan {
  let resources: readonly string[];
  let tick: number | undefined;
  try {
    tick = method.key.usesTick ? tickOf(method) : undefined;
    resources = method.key.resolve(args, tick);
    if (method.kind !== 'lock' && resources.length > 1) {
      throw new LockKeyError(
        `The key function of @${method.decorator}() on ${method.where} returned ${resources.length} names; ` +
          `${method.kind === 'permit' ? 'a semaphore' : `mode '${method.kind}'`} takes one. Return a single string.`,
      );
    }
  } catch (error) {
    throw markLockFailure(error);
  }
  const frame = lockStorage.getStore();
  // Only locks of this engine count: two applications in one process never share a lock.
  if (frame?.engine !== engine) return { frame, missing: resources, reused: undefined, tick };
  const accepts = reusableBy(method);
  const missing = resources.filter((resource) => !lockOf(frame, resource, accepts)?.isHeld);
  return {
    frame,
    missing,
    reused: missing.length === 0 ? lockOf(frame, resources[0], accepts) : undefined,
    tick,
  };
}

/**
 * Which holds of the call chain a call reuses: one of its own kind, and for a
 * read a write hold too (the writer is alone, so its callee reads safely). A
 * write under a read of the same chain would wait for its own reader: refused.
 */
function reusableBy(method: LockedMethod): (lock: Lock) => boolean {
  const { kind } = method;
  return (lock) => {
    const held = holdKindOf(lock);
    if (held === kind || (kind === 'read' && held === 'write')) return true;
    if (kind === 'write' && held === 'read' && lock.isHeld) {
      throw new LockOptionsError(
        `@Locked() on ${method.where} asks for a write hold of '${lock.resources[0]}', but its caller holds ` +
          'a read hold of it, and a writer waits for every reader to leave, its own caller too. ' +
          "Take mode 'write' in the outer method instead.",
      );
    }
    return false;
  };
}

/**
 * Acquires what the method holds (an exclusive lock, a read or a write hold,
 * a permit) on the resources it misses, runs `routine` with it, extending the
 * lease meanwhile (unless `autoExtend` is false) and releases it afterwards.
 */
export function holdAndRun<T>(
  method: LockedMethod,
  engine: LockEngine,
  resources: readonly string[],
  routine: (lock: Lock) => T | Promise<T>,
  options: UsingOptions,
): Promise<T> {
  const { kind } = method;
  if (kind === 'lock') return engine.using(resources, routine, options);
  try {
    const leases = leaseMaker(method, engine);
    return kind === 'permit'
      ? leases.semaphore(resources[0], method.permits!).using(routine, options)
      : leases.readWriteLock(resources[0]).using(kind, routine, options);
  } catch (error) {
    return Promise.reject(error);
  }
}

/** What makes read-write locks and semaphores: the engine's, or the in-memory engine's own. */
interface LeaseMaker {
  readWriteLock(resource: string): Pick<ReadWriteLock, 'using'>;
  semaphore(name: string, permits: number): Pick<Semaphore, 'using'>;
}

/**
 * The engine's read-write locks and semaphores; an engine that is not a
 * LockEngine (the testing module's in-memory one) brings its own, and one
 * that has none is refused with what to change.
 */
function leaseMaker(method: LockedMethod, engine: LockEngine): LeaseMaker {
  if (engine instanceof LockEngine) {
    return {
      readWriteLock: (resource) => readWriteLock(engine, resource),
      semaphore: (name, permits) => semaphore(engine, name, permits),
    };
  }
  const own = engine as Partial<LeaseMaker>;
  if (typeof own.readWriteLock === 'function' && typeof own.semaphore === 'function') {
    return own as LeaseMaker;
  }
  throw new LockEngineUnsupportedError(method.where, describeKind(method.kind, method.decorator));
}

function describeKind(kind: LockedHoldKind, decorator: string): string {
  return kind === 'permit'
    ? `@${decorator}() takes a semaphore's permit`
    : `@${decorator}() takes a ${kind} hold of a read-write lock`;
}

/** The tick a call at this moment belongs to: of the `tick` period option, else of the schedule. */
function tickOf(method: LockedMethod): number {
  const now = Date.now();
  const period = method.options.tick;
  if (period !== undefined) return Math.floor(now / period) * period;
  const tickAt = method.schedule?.tickAt;
  if (!tickAt) throw noTickError(method.where, method.schedule ?? undefined);
  return tickAt(now);
}

/** The frame the method runs in: the caller's, for a reused lock; else one more link of the chain. */
export function enter(
  method: LockedMethod,
  p: Plan,
  engine: LockEngine,
  lock: Lock,
  args: unknown[],
): LockFrame {
  for (const param of method.params) args[param.index] = param.pick(lock);
  if (lock === p.reused) return p.frame!;
  const { frame } = p;
  frame?.request?.locks.push(lock);
  return {
    engine,
    lock,
    outer: frame?.engine === engine ? frame : undefined,
    request: frame?.request,
  };
}
