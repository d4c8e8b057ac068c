import { isObservable, type Observable } from 'rxjs';
import { LockBusyError, type Lock, type LockEngine } from '../../engine/index.js';
import { lockStorage, type LockFrame } from '../context/lock-context.js';
import { markLockFailure } from '../context/lock-failures.js';
import type { JobSchedule } from '../scheduling/job-schedule.js';
import { runHeld } from '../scheduling/minimum-hold.runner.js';
import { emitSkipped } from '../scheduling/skipped-run.event.js';
import type { LockedMethod, LockedRuntime } from './locked.metadata.js';
import { optionsOf } from './locked.options.js';
import { enter, holdAndRun, plan, type Plan } from './locked.runner.js';

/**
 * Not an async function, and no async closures inside: once AsyncLocalStorage
 * is on, every Promise runs a hook, so a call makes as few as it can (one
 * for the failure mapping, one for the method's result) besides the engine's.
 */
export function lockedCall(
  method: LockedMethod,
  runtime: LockedRuntime,
  self: object,
  args: unknown[],
): Promise<unknown> {
  const { engine } = runtime;
  let p: Plan;
  try {
    p = plan(method, engine, args);
  } catch (error) {
    return Promise.reject(error);
  }
  if (p.reused) {
    try {
      return Promise.resolve(runIn(enter(method, p, engine, p.reused, args), method, self, args));
    } catch (error) {
      return Promise.reject(error);
    }
  }
  let entered = false;
  const routine = (lock: Lock) => {
    entered = true;
    return runIn(enter(method, p, engine, lock, args), method, self, args);
  };
  const options = optionsOf(method, runtime);
  const { holdAtLeast } = method.options;
  return (
    holdAtLeast === undefined
      ? holdAndRun(method, engine, p.missing, routine, options)
      : runHeld(engine, p.missing, options, holdAtLeast, routine)
  ).then(undefined, (error: unknown) => {
    if (entered) throw error;
    if (method.schedule && error instanceof LockBusyError)
      return skipRun(method, method.schedule, engine, p, error, args);
    if (method.options.onBusy && error instanceof LockBusyError)
      return method.options.onBusy(error, args);
    throw markLockFailure(error);
  });
}

/** Runs the method in `frame`. */
export function runIn(
  frame: LockFrame,
  method: LockedMethod,
  self: object,
  args: unknown[],
): unknown {
  return lockStorage.run(frame, callMethod, method, self, args);
}

function callMethod(method: LockedMethod, self: object, args: unknown[]): unknown {
  const result = method.original.apply(self, args);
  // Declared without an Observable return type but returned one: the lock covers the whole stream.
  if (isObservable(result)) return lastValue(result);
  return isThenable(result) ? Promise.resolve(result).then(settled) : result;
}

const settled = (value: unknown) => (isObservable(value) ? lastValue(value) : value);

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    (typeof value === 'object' || typeof value === 'function') &&
    value !== null &&
    typeof (value as { then?: unknown }).then === 'function'
  );
}

function lastValue(source: Observable<unknown>): Promise<unknown> {
  return new Promise((resolve, reject) => {
    let last: unknown;
    source.subscribe({
      next: (value) => (last = value),
      error: reject,
      complete: () => resolve(last),
    });
  });
}

/**
 * A scheduled run that found its lock held: another instance runs or ran this
 * tick. Told through the `skipped` event (the debug log and the telemetry
 * counter listen to it), not thrown: the scheduler would log it as an error.
 */
function skipRun(
  method: LockedMethod,
  schedule: JobSchedule,
  engine: LockEngine,
  p: Plan,
  error: LockBusyError,
  args: unknown[],
): unknown {
  emitSkipped(engine, {
    job: schedule.job,
    resources: p.missing,
    tick: p.tick,
    retryAfter: error.retryAfter,
  });
  return method.options.onBusy ? method.options.onBusy(error, args) : undefined;
}
