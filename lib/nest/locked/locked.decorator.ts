import { Observable } from 'rxjs';
import { LockOptionsError } from '../../engine/index.js';
import { LockKeyError, LockSetupError } from './locked.errors.js';
import { compileLockKey, type LockKey } from './lock-key.js';
import { lockedCall } from './locked-call.runner.js';
import { lockedStream } from './locked-stream.runner.js';
import { lockedSubscription } from './locked-subscription.runner.js';
import {
  LOCK_PARAMS_METADATA,
  LOCKED_METADATA,
  LOCKED_RUNTIME,
  type LockedHoldKind,
  type LockedMethod,
  type LockedRuntime,
} from './locked.metadata.js';
import { checkLockedOptions, type LimitedOptions, type LockedOptions } from './locked.options.js';
import type { LockedDecorator } from './locked.types.js';
import { readSchedule } from '../scheduling/job-schedule.js';

/**
 * Runs the method under a distributed lock on the resource(s) named by `key`,
 * built from the arguments the method actually receives (after Nest's pipes).
 * The lease is extended while the method runs and released when it returns,
 * throws, or (for a method declared to return an Observable) when the stream
 * completes, errors or is unsubscribed. A GraphQL `@Subscription()` resolver
 * holds its lock while the subscription lasts: until the async iterator it
 * returns is done, throws, or is ended by `return()` when the client
 * unsubscribes.
 *
 * The method must return a Promise (be `async`) or an Observable, which is
 * what the locked method returns; a method that returns anything else does
 * not compile (see {@link LockedResult}). A key function's parameters are
 * checked against the method's: `(order: Order) => ...` compiles on a method
 * whose first parameter is an Order, not on one that takes an id.
 *
 * Works on controller handlers and on provider methods; the instance must
 * come from an application that imports RedisLockModule, otherwise the call
 * throws LockSetupError instead of running unlocked.
 *
 * @example
 * @Post(':id/purchase')
 * @Locked('product:<0>')
 * async purchase(@Param('id', ParseIntPipe) id: number, @FencingToken() token: number) { ... }
 *
 * @Locked(['stock:<0.sku>', 'cart:<1>'], { wait: false })
 * async reserve(item: Item, cartId: string) { ... }
 *
 * @Locked((order: Order) => `order:${order.id}`)
 * async pay(order: Order) { ... }
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- a template takes any arguments
export function Locked<KeyArgs extends unknown[] = any[]>(
  key: LockKey<KeyArgs>,
  options?: LockedOptions,
): LockedDecorator<KeyArgs> {
  return decorateLocked('Locked', key, options);
}

/**
 * Runs the method with a permit of the semaphore named by `name` (a template
 * such as `'exports:<0.tenant>'`, as `@Locked()` takes, or a function of the
 * arguments): at most `permits` runs at once across every instance. A run
 * that finds every permit taken waits as `@Locked()` does (`wait`,
 * `waitTimeout`, `retry`), or with `wait: false` fails at once with a
 * LockBusyError (HTTP 409 with Retry-After). The permit's lease is extended
 * while the method runs and given back when it ends; the method reads it with
 * `@CurrentLock()` (a {@link Permit}, with its `slot`), `@FencingToken()` or
 * `LockContext`. It compiles on the methods `@Locked()` compiles on.
 *
 * @example
 * @Post('exports')
 * @Limited('exports', { permits: 2, wait: false })
 * async export(@Body() query: ExportQuery) { ... }
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- a template takes any arguments
export function Limited<KeyArgs extends unknown[] = any[]>(
  name: LockKey<KeyArgs>,
  options: LimitedOptions,
): LockedDecorator<KeyArgs> {
  return decorateLocked('Limited', name, options);
}

function decorateLocked<KeyArgs extends unknown[]>(
  decorator: 'Locked' | 'Limited',
  key: LockKey<KeyArgs>,
  options: LockedOptions | LimitedOptions | undefined,
): LockedDecorator<KeyArgs> {
  const label = `@${decorator}()`;
  const decorate: MethodDecorator = (target, propertyKey, descriptor) => {
    const className = typeof target === 'function' ? target.name : target.constructor.name;
    const where = `${className}.${String(propertyKey)}`;
    const original = descriptor.value as unknown;
    if (typeof original !== 'function')
      throw new TypeError(`${label} on ${where}: it goes on methods only.`);
    if (typeof target === 'function') {
      throw new TypeError(
        `${label} on ${where}: static methods cannot be locked; lock an instance method of a provider.`,
      );
    }
    const paramTypes = Reflect.getMetadata('design:paramtypes', target, propertyKey) as
      unknown[] | undefined;
    const checked = checkLockedOptions(`${label} on ${where}`, options, decorator);
    const kind: LockedHoldKind = decorator === 'Limited' ? 'permit' : (checked.mode ?? 'lock');
    const { mode: _mode, permits, ...own } = checked;
    const method: LockedMethod = {
      where,
      decorator,
      key: compileLockKey(key, where, paramTypes?.length, decorator),
      kind,
      permits,
      options: own,
      params: Reflect.getMetadata(LOCK_PARAMS_METADATA, target, propertyKey) ?? [],
      original: original as LockedMethod['original'],
    };
    if (kind !== 'lock') checkLease(label, where, key, kind, own.holdAtLeast);
    for (const param of method.params) {
      if (param.index <= method.key.maxIndex && usesArgument(key, param.index)) {
        throw new TypeError(
          `${label} on ${where}: <${param.index}> is a lock parameter, filled in after locking; it cannot be part of the key.`,
        );
      }
    }
    const returnType = Reflect.getMetadata('design:returntype', target, propertyKey) as unknown;
    if (returnType === Function) {
      throw new TypeError(
        `${label} on ${where}: its return type reads as Function in the decorator metadata, which TypeScript ` +
          'writes for a class imported as a type only (`import type { Observable }` or `{ type Observable }`). ' +
          `${label} reads it to tell a stream from a Promise: import the return type as a value ` +
          "(`import { Observable } from 'rxjs'`).",
      );
    }
    const declaredStream =
      returnType === Observable ||
      (typeof returnType === 'function' && returnType.prototype instanceof Observable);
    if (declaredStream && method.options.holdAtLeast !== undefined) {
      throw new TypeError(
        `${label} on ${where}: holdAtLeast applies to methods that return a value or a Promise, and this one ` +
          'returns an Observable. Return a Promise (e.g. lastValueFrom(stream)), or drop holdAtLeast.',
      );
    }

    const wrapper = {
      [method.original.name](
        this: { [LOCKED_RUNTIME]?: LockedRuntime } | undefined,
        ...args: unknown[]
      ): unknown {
        const runtime = this?.[LOCKED_RUNTIME];
        const streams = (method.streams ??= declaredStream || isSse(wrapper));
        if (!runtime) {
          const error = new LockSetupError(where, decorator);
          return streams
            ? new Observable((subscriber) => subscriber.error(error))
            : Promise.reject(error);
        }
        // Read once: null (not scheduled) is kept too, where `??=` would read it on every call.
        if (method.schedule === undefined) method.schedule = readSchedule(wrapper, where) ?? null;
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
  return decorate as LockedDecorator<KeyArgs>;
}

/**
 * A read-write lock and a semaphore are one resource each: several templates
 * are refused where they are written, and holdAtLeast (a plain lock's) too.
 */
function checkLease(
  label: string,
  where: string,
  key: LockKey,
  kind: Exclude<LockedHoldKind, 'lock'>,
  holdAtLeast: number | undefined,
): void {
  const what = kind === 'permit' ? 'a semaphore' : `mode '${kind}'`;
  if (holdAtLeast !== undefined) {
    throw new LockOptionsError(
      `${label} on ${where}: holdAtLeast keeps an exclusive lock after the method returned; ${what} ` +
        `releases when the method ends. Drop holdAtLeast, or ${kind === 'permit' ? 'use @Locked() (a plain lock)' : 'lock without a mode'}.`,
    );
  }
  if (Array.isArray(key) && key.length > 1) {
    throw new LockKeyError(
      `${label} on ${where}: ${what} takes one name, got ${key.length} templates. ` +
        'Use one template, or take several exclusive locks with @Locked([...]) and no mode.',
    );
  }
}

/** What Nest's `@Sse()` marks its handlers with. */
const SSE_METADATA = '__sse__';

function isSse(method: object): boolean {
  return Reflect.getMetadata(SSE_METADATA, method) === true;
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
