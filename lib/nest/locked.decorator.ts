import { from, isObservable, Observable, type Subscription } from 'rxjs';
import { LockBusyError, type AcquireOptions, type Lock, type LockEngine } from '../engine/index.js';
import { compileLockKey, type CompiledLockKey, type LockKey } from './lock-key.js';
import { lockStorage, type LockFrame } from './lock-context.js';
import { LOCK_PARAMS_METADATA, type LockParam } from './lock-params.decorator.js';
import { markLockFailure } from './lock-failures.js';
import { LockSetupError } from './locked-errors.js';
import { checkLockedOptions, mergeLockedOptions } from './locked-options.js';
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
}

/**
 * Runs the method under a distributed lock on the resource(s) named by `key`,
 * built from the arguments the method actually receives (after Nest's pipes).
 * The lease is extended while the method runs and released when it returns,
 * throws, or (for a method declared to return an Observable) when the stream
 * completes, errors or is unsubscribed. The locked method returns a Promise
 * (or that Observable).
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
        return streams
          ? lockedStream(method, runtime, this, args)
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

function usesArgument(key: LockKey, index: number): boolean {
  const templates = typeof key === 'string' ? [key] : typeof key === 'function' ? [] : key;
  return templates.some((t) => new RegExp(`<${index}[.>]`).test(t));
}

/** What one call does before running the method: which lock to take, or reuse. */
interface Plan {
  readonly engine: LockEngine;
  readonly frame: LockFrame | undefined;
  /** Resources not yet held by this call chain. */
  readonly missing: readonly string[];
  /** The lock already held, when every resource is (re-entrant call). */
  readonly reused: Lock | undefined;
  readonly options: AcquireOptions & { autoExtend: boolean };
}

const optionCache = new WeakMap<
  LockedMethod,
  { defaults: LockedDefaults; merged: Plan['options'] }
>();

function plan(method: LockedMethod, runtime: LockedRuntime, args: unknown[]): Plan {
  const resources = method.key.resolve(args);
  let cached = optionCache.get(method);
  if (cached?.defaults !== runtime.defaults) {
    cached = {
      defaults: runtime.defaults,
      merged: mergeLockedOptions(method.options, runtime.defaults),
    };
    optionCache.set(method, cached);
  }
  const frame = lockStorage.getStore();
  const held = frame?.engine === runtime.engine ? frame.held : undefined;
  const missing = held ? resources.filter((r) => !held.get(r)?.isHeld) : resources;
  return {
    engine: runtime.engine,
    frame,
    missing,
    reused: missing.length === 0 ? held!.get(resources[0]) : undefined,
    options: cached.merged,
  };
}

/** The frame the method runs in: the parent's locks plus this one. */
function enter(method: LockedMethod, p: Plan, lock: Lock, args: unknown[]): LockFrame {
  for (const param of method.params) args[param.index] = param.pick(lock);
  if (lock === p.reused) return p.frame!;
  p.frame?.request?.locks.push(lock);
  const held = new Map(p.frame?.engine === p.engine ? p.frame.held : undefined);
  for (const resource of lock.resources) held.set(resource, lock);
  return { engine: p.engine, held, lock, request: p.frame?.request };
}

async function lockedCall(
  method: LockedMethod,
  runtime: LockedRuntime,
  self: object,
  args: unknown[],
): Promise<unknown> {
  let p: Plan;
  try {
    p = plan(method, runtime, args);
  } catch (error) {
    throw markLockFailure(error);
  }
  const run = (lock: Lock) =>
    lockStorage.run(enter(method, p, lock, args), async () => {
      const result = await method.original.apply(self, args);
      // Declared without an Observable return type but returned one: the lock covers the whole stream.
      return isObservable(result) ? lastValue(result) : result;
    });
  if (p.reused) return run(p.reused);
  let entered = false;
  try {
    return await p.engine.using(
      p.missing,
      (lock) => {
        entered = true;
        return run(lock);
      },
      p.options,
    );
  } catch (error) {
    if (entered) throw error;
    if (method.options.onBusy && error instanceof LockBusyError)
      return method.options.onBusy(error, args);
    throw markLockFailure(error);
  }
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
    let p: Plan;
    try {
      p = plan(method, runtime, args);
    } catch (error) {
      subscriber.error(markLockFailure(error));
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
        lockStorage.run(enter(method, p, lock, args), () => {
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
      : p.engine.using(p.missing, run, { ...p.options, signal: abandoned.signal });
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

function toObservable(value: unknown): Observable<unknown> {
  return isObservable(value) ? value : from(Promise.resolve(value));
}
