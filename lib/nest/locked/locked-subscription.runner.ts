import { LockBusyError, type Lock } from '../../engine/index.js';
import { lockStorage, type LockFrame } from '../context/lock-context.js';
import { markLockFailure } from '../context/lock-failures.js';
import { runIn } from './locked-call.runner.js';
import type { LockedMethod, LockedRuntime } from './locked.metadata.js';
import { optionsOf } from './locked.options.js';
import { enter, holdAndRun, plan } from './locked.runner.js';

/**
 * A subscription resolver under a lock: takes the lock, runs the method in it,
 * and resolves with an iterator over the async iterable the method returns;
 * the lock is held until that iteration ends, and released before its end
 * (done, error, `return()`) reaches the caller. A failure to lock rejects,
 * so the subscription is refused before it starts.
 */
export function lockedSubscription(
  method: LockedMethod,
  runtime: LockedRuntime,
  self: object,
  args: unknown[],
): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const { engine } = runtime;
    // Arguments that make no key throw here, in the executor: that rejects the Promise.
    const p = plan(method, engine, args);
    let entered = false;
    const run = (lock: Lock): Promise<unknown> => {
      entered = true;
      const frame = enter(method, p, engine, lock, args);
      return Promise.resolve(runIn(frame, method, self, args)).then((result) => {
        if (!isAsyncIterable(result)) return resolve(result);
        // Hand the iterator out now; the routine, and so the lock, lasts until its iteration ends.
        return new Promise<void>((ended) =>
          resolve(heldIterator(result, frame, ended, () => held, lock.signal)),
        );
      });
    };
    const held: Promise<unknown> = p.reused
      ? Promise.resolve(p.reused).then(run)
      : holdAndRun(method, engine, p.missing, run, optionsOf(method, runtime));
    held.then(undefined, (error: unknown) => {
      if (entered) return reject(error);
      if (method.options.onBusy && error instanceof LockBusyError)
        return resolve(method.options.onBusy(error, args));
      reject(markLockFailure(error));
    });
  });
}

function isAsyncIterable(value: unknown): value is AsyncIterable<unknown> {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { [Symbol.asyncIterator]?: unknown })[Symbol.asyncIterator] === 'function'
  );
}

/**
 * Iterates `source` in the lock's frame (so LockContext works in a generator's
 * body), calls `ended` once the iteration is over, and answers that last step
 * only when `released()` has settled. A `return()` while a `next()` is pending
 * waits for that step like the source does: an async generator finishes the
 * step it is in before it returns, and the lock covers that step.
 */
function heldIterator(
  source: AsyncIterable<unknown>,
  frame: LockFrame,
  ended: () => void,
  released: () => Promise<unknown>,
  signal: AbortSignal,
): AsyncIterableIterator<unknown> {
  const iterator = source[Symbol.asyncIterator]();
  let over = false;
  // An iteration that outlives its lock (lost, taken over, released from outside, held past a
  // shutdown's timeout) ends with the lock's LockLostError, its pending read included, and
  // the source is told to return: it never goes on unlocked.
  const lost = new Promise<never>((_, reject) =>
    signal.addEventListener('abort', () => reject(signal.reason as Error), { once: true }),
  );
  lost.catch(noop);
  const stopLost = (): Promise<never> => {
    if (!over) {
      Promise.resolve(lockStorage.run(frame, () => iterator.return?.())).then(noop, noop);
    }
    return failed(signal.reason);
  };
  const finish = (): Promise<unknown> => {
    if (!over) {
      over = true;
      ended();
    }
    return released().then(noop, noop);
  };
  const last = (result: IteratorResult<unknown>) => finish().then(() => result);
  const failed = (error: unknown) =>
    finish().then(() => {
      throw error;
    });
  const step = (call: () => PromiseLike<IteratorResult<unknown>> | IteratorResult<unknown>) =>
    Promise.resolve(lockStorage.run(frame, call)).then(
      (result) => (result.done ? last(result) : result),
      failed,
    );
  return {
    next: (...value: [] | [unknown]) => {
      if (over) return Promise.resolve({ done: true, value: undefined });
      if (signal.aborted) return stopLost();
      return Promise.race([step(() => iterator.next(...value)), lost]).catch((error: unknown) =>
        signal.aborted && !over ? stopLost() : Promise.reject(error),
      );
    },
    return: (value?: unknown) =>
      over
        ? Promise.resolve({ done: true, value })
        : Promise.resolve(
            lockStorage.run(frame, () => iterator.return?.(value) ?? { done: true, value }),
          ).then(last, failed),
    throw: (error?: unknown) =>
      over || !iterator.throw ? failed(error) : step(() => iterator.throw!(error)),
    [Symbol.asyncIterator]() {
      return this;
    },
  };
}

function noop(): void {}
