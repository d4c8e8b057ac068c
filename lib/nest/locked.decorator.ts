import { from, isObservable, Observable, type Subscription } from 'rxjs';
import { LockBusyError, type AcquireOptions, type Lock, type LockEngine } from '../engine/index.js';
import { compileLockKey, type CompiledLockKey, type LockKey } from './lock-key.js';
import { lockOf, lockStorage, type LockFrame } from './lock-context.js';
import { LOCK_PARAMS_METADATA, type LockParam } from './lock-params.decorator.js';
import { markLockFailure } from './lock-failures.js';
import { LockSetupError } from './locked-errors.js';
import { checkLockedOptions, mergeLockedOptions } from './locked-options.js';
import { noTickError, readSchedule, runHeld, type JobSchedule } from './scheduled-jobs.js';
import type { LockedDefaults, LockedOptions } from './redis-lock-module-options.interface.js';

/** @internal Metadata on a decorated method, for the explorer. */
export const LOCKED_METADATA = 'redis-lock:locked';

/** @internal What RedisLockModule installs on the classes whose methods are locked. */
export interface LockedRuntime {
  readonly engine: LockEngine;
  readonly defaults: LockedDefaults;
}

/** @internal The property (on instances and prototypes) that holds the runtime. */
export const LOCKED_RUNTIME = Symbol('redis-lock.runtime');

interface LockedMethod {
  readonly where: string;
  readonly key: CompiledLockKey;
  readonly options: LockedOptions;
  readonly params: readonly LockParam[];
  readonly original: (...args: unknown[]) => unknown;
  /**
   * How @nestjs/schedule runs it (null: it does not). Read at the first call:
   * `@Cron()` written above `@Locked()` decorates the wrapper after `@Locked()` has run.
   */
  schedule?: JobSchedule | null;
  /**
   * A GraphQL subscription resolver, whose lock lasts as long as the iteration
   * of what it returns. Known at the first call: `@Subscription()` written
   * above `@Locked()` decorates the wrapper after `@Locked()` has run.
   */
  subscription?: boolean;
  /** Its options merged with the defaults of the application that called it last. */
  merged?: { readonly defaults: LockedDefaults; readonly options: MergedOptions };
}

/**
 * Runs the method under a distributed lock on the resource(s) named by `key`,
 * built from the arguments the method actually receives (after Nest's pipes).
 * The lease is extended while the method runs and released when it returns,
 * throws, or (for a method declared to return an Observable) when the stream
 * completes, errors or is unsubscribed. The locked method returns a Promise
 * (or that Observable). A GraphQL `@Subscription()` resolver holds its lock
 * while the subscription lasts: until the async iterator it returns is done,
 * throws, or is ended by `return()` when the client unsubscribes.
 *
 * Works on controller handlers and on provider methods; the instance must
 * come from an application that imports RedisLockModule, otherwise the call
 * throws LockSetupError instead of running unlocked.
 *
 * @example
 * @Post(':id/purchase')
 * @Locked('product:<0>')
 * purchase(@Param('id', ParseIntPipe) id: number, @FencingToken() token: number) { ... }
 *
 * @Locked(['stock:<0.sku>', 'cart:<1>'], { wait: false })
 * reserve(item: Item, cartId: string) { ... }
 */
export function Locked(key: LockKey, options?: LockedOptions): MethodDecorator {
  return (target, propertyKey, descriptor) => {
    const className = typeof target === 'function' ? target.name : target.constructor.name;
    const where = `${className}.${String(propertyKey)}`;
    const original = descriptor.value as unknown;
    if (typeof original !== 'function')
      throw new TypeError(`@Locked() on ${where}: it goes on methods only.`);
    if (typeof target === 'function') {
      throw new TypeError(
        `@Locked() on ${where}: static methods cannot be locked; lock an instance method of a provider.`,
      );
    }
    const paramTypes = Reflect.getMetadata('design:paramtypes', target, propertyKey) as
      unknown[] | undefined;
    const method: LockedMethod = {
      where,
      key: compileLockKey(key, where, paramTypes?.length),
      options: checkLockedOptions(`@Locked() on ${where}`, options),
      params: Reflect.getMetadata(LOCK_PARAMS_METADATA, target, propertyKey) ?? [],
      original: original as LockedMethod['original'],
    };
    for (const param of method.params) {
      if (param.index <= method.key.maxIndex && usesArgument(key, param.index)) {
        throw new TypeError(
          `@Locked() on ${where}: <${param.index}> is a lock parameter, filled in after locking; it cannot be part of the key.`,
        );
      }
    }
    const returnType = Reflect.getMetadata('design:returntype', target, propertyKey) as unknown;
    const streams =
      returnType === Observable ||
      (typeof returnType === 'function' && returnType.prototype instanceof Observable);
    if (streams && method.options.holdAtLeast !== undefined) {
      throw new TypeError(
        `@Locked() on ${where}: holdAtLeast applies to methods that return a value or a Promise, and this one ` +
          'returns an Observable. Return a Promise (e.g. lastValueFrom(stream)), or drop holdAtLeast.',
      );
    }

    const wrapper = {
      [method.original.name](
        this: { [LOCKED_RUNTIME]?: LockedRuntime } | undefined,
        ...args: unknown[]
      ): unknown {
        const runtime = this?.[LOCKED_RUNTIME];
        if (!runtime) {
          const error = new LockSetupError(where);
          return streams
            ? new Observable((subscriber) => subscriber.error(error))
            : Promise.reject(error);
        }
        method.schedule ??= readSchedule(wrapper, where) ?? null;
        if (streams) return lockedStream(method, runtime, this, args);
        method.subscription ??= isSubscription(wrapper);
        return method.subscription
          ? lockedSubscription(method, runtime, this, args)
          : lockedCall(method, runtime, this, args);
      },
    }[method.original.name];

    for (const metadataKey of Reflect.getOwnMetadataKeys(original)) {
      Reflect.defineMetadata(metadataKey, Reflect.getOwnMetadata(metadataKey, original), wrapper);
    }
    Reflect.defineMetadata(LOCKED_METADATA, where, wrapper);
    Object.defineProperty(wrapper, 'length', { value: method.original.length });
    descriptor.value = wrapper as never;
    return descriptor;
  };
}

/** What `@Subscription()` of @nestjs/graphql marks its methods with (read without loading it). */
const GRAPHQL_RESOLVER_TYPE = 'graphql:resolver_type';

function isSubscription(method: object): boolean {
  return Reflect.getMetadata(GRAPHQL_RESOLVER_TYPE, method) === 'Subscription';
}

function usesArgument(key: LockKey, index: number): boolean {
  const templates = typeof key === 'string' ? [key] : typeof key === 'function' ? [] : key;
  return templates.some((t) => new RegExp(`<${index}[.>]`).test(t));
}

type MergedOptions = AcquireOptions & { autoExtend: boolean };

/**
 * The method's options over the module's defaults, merged once per application's defaults.
 * A scheduled job does not wait by default: a lock held means another instance runs this tick,
 * and waiting for it would run the tick a second time.
 */
function optionsOf(method: LockedMethod, runtime: LockedRuntime): MergedOptions {
  const cached = method.merged;
  if (cached?.defaults === runtime.defaults) return cached.options;
  const own =
    method.schedule && method.options.wait === undefined
      ? { ...method.options, wait: false }
      : method.options;
  const options = mergeLockedOptions(own, runtime.defaults);
  method.merged = { defaults: runtime.defaults, options };
  return options;
}

/** What one call does before running the method: which lock to take, or reuse. */
interface Plan {
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
function plan(method: LockedMethod, engine: LockEngine, args: unknown[]): Plan {
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
  if (engine.listenerCount('skipped') > 0) {
    engine.emit('skipped', {
      job: schedule.job,
      resources: p.missing,
      tick: p.tick,
      retryAfter: error.retryAfter,
    });
  }
  return method.options.onBusy ? method.options.onBusy(error, args) : undefined;
}

/** The frame the method runs in: the caller's, for a reused lock; else one more link of the chain. */
function enter(
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

/**
 * Not an async function, and no async closures inside: once AsyncLocalStorage
 * is on, every Promise runs a hook, so a call makes as few as it can (one
 * for the failure mapping, one for the method's result) besides the engine's.
 */
function lockedCall(
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
      ? engine.using(p.missing, routine, options)
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
function runIn(frame: LockFrame, method: LockedMethod, self: object, args: unknown[]): unknown {
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
 * An Observable that takes the lock when subscribed, runs the method and
 * mirrors its stream, and releases when the stream completes, errors or the
 * subscriber unsubscribes. Completion and errors reach the subscriber after
 * the release.
 */
function lockedStream(
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
      new Promise<void>((resolve) => {
        stop = resolve;
        if (closed) return resolve();
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
      : engine.using(p.missing, run, { ...optionsOf(method, runtime), signal: abandoned.signal });
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

/**
 * A subscription resolver under a lock: takes the lock, runs the method in it,
 * and resolves with an iterator over the async iterable the method returns;
 * the lock is held until that iteration ends, and released before its end
 * (done, error, `return()`) reaches the caller. A failure to lock rejects,
 * so the subscription is refused before it starts.
 */
function lockedSubscription(
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
          resolve(heldIterator(result, frame, ended, () => held)),
        );
      });
    };
    const held: Promise<unknown> = p.reused
      ? Promise.resolve(p.reused).then(run)
      : engine.using(p.missing, run, optionsOf(method, runtime));
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
): AsyncIterableIterator<unknown> {
  const iterator = source[Symbol.asyncIterator]();
  let over = false;
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
    next: (...value: [] | [unknown]) =>
      over
        ? Promise.resolve({ done: true, value: undefined })
        : step(() => iterator.next(...value)),
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

function toObservable(value: unknown): Observable<unknown> {
  return isObservable(value) ? value : from(Promise.resolve(value));
}
