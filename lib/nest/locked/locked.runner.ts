import type { Lock, LockEngine } from '../../engine/index.js';
import { lockOf, lockStorage, type LockFrame } from '../context/lock-context.js';
import { markLockFailure } from '../context/lock-failures.js';
import { noTickError } from '../scheduling/job-schedule.js';
import type { LockedMethod } from './locked.metadata.js';

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
  } catch (error) {
    throw markLockFailure(error);
  }
  const frame = lockStorage.getStore();
  // Only locks of this engine count: two applications in one process never share a lock.
  if (frame?.engine !== engine) return { frame, missing: resources, reused: undefined, tick };
  const missing = resources.filter((resource) => !lockOf(frame, resource)?.isHeld);
  return {
    frame,
    missing,
    reused: missing.length === 0 ? lockOf(frame, resources[0]) : undefined,
    tick,
  };
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
