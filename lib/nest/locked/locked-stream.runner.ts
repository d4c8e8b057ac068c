import { from, isObservable, mergeMap, Observable, of, type Subscription } from 'rxjs';
import { LockBusyError, type Lock } from '../../engine/index.js';
import { lockStorage } from '../context/lock-context.js';
import { markLockFailure } from '../context/lock-failures.js';
import type { LockedMethod, LockedRuntime } from './locked.metadata.js';
import { optionsOf } from './locked.options.js';
import { enter, holdAndRun, plan, type Plan } from './locked.runner.js';

/**
 * An Observable that takes the lock when subscribed, runs the method and
 * mirrors its stream, and releases when the stream completes, errors or the
 * subscriber unsubscribes. Completion and errors reach the subscriber after
 * the release.
 */
export function lockedStream(
  method: LockedMethod,
  runtime: LockedRuntime,
  self: object,
  args: unknown[],
): Observable<unknown> {
  return new Observable((subscriber) => {
    const { engine } = runtime;
    let p: Plan;
    try {
      p = plan(method, engine, args);
    } catch (error) {
      subscriber.error(error);
      return;
    }
    let inner: Subscription | undefined;
    let stop: (() => void) | undefined;
    let closed = false;
    // A subscriber that leaves while the lock is still awaited stops the wait too,
    // instead of leaving it to run on and briefly take a lock nobody wants.
    const abandoned = new AbortController();
    let failure: { error: unknown } | undefined;
    const run = (lock: Lock) =>
      new Promise<void>((settle) => {
        if (closed) return settle();
        // The stream is ours to stop: one that outlives its lock (lost, taken over, released from
        // outside, or held past a shutdown's timeout) ends with the lock's LockLostError.
        const { signal } = lock;
        const resolve = () => {
          signal.removeEventListener('abort', onLost);
          settle();
        };
        const onLost = () => {
          failure ??= { error: signal.reason };
          inner?.unsubscribe();
          resolve();
        };
        stop = resolve;
        if (signal.aborted) return onLost();
        signal.addEventListener('abort', onLost, { once: true });
        lockStorage.run(enter(method, p, engine, lock, args), () => {
          try {
            inner = toObservable(method.original.apply(self, args)).subscribe({
              next: (value) => subscriber.next(value),
              error: (error: unknown) => {
                failure = { error };
                resolve();
              },
              complete: resolve,
            });
          } catch (error) {
            failure = { error };
            resolve();
          }
        });
      });
    const held = p.reused
      ? run(p.reused)
      : holdAndRun(method, engine, p.missing, run, {
          ...optionsOf(method, runtime),
          signal: abandoned.signal,
        });
    held.then(
      () => {
        if (closed) return;
        if (failure) subscriber.error(failure.error);
        else subscriber.complete();
      },
      (error: unknown) => {
        if (closed) return;
        if (!(method.options.onBusy && error instanceof LockBusyError))
          return subscriber.error(markLockFailure(error));
        try {
          inner = toObservable(method.options.onBusy(error, args)).subscribe(subscriber);
        } catch (fallbackError) {
          subscriber.error(fallbackError);
        }
      },
    );
    return () => {
      closed = true;
      inner?.unsubscribe();
      stop?.();
      abandoned.abort();
    };
  });
}

/** A method's result as a stream: an Observable, or a Promise of one (an `async` handler's). */
function toObservable(value: unknown): Observable<unknown> {
  if (isObservable(value)) return value;
  return from(Promise.resolve(value)).pipe(
    mergeMap((settled) => (isObservable(settled) ? settled : of(settled))),
  );
}
