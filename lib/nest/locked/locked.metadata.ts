import type { Lock, LockEngine } from '../../engine/index.js';
import type { JobSchedule } from '../scheduling/job-schedule.js';
import type { CompiledLockKey } from './lock-key.js';
import type { LockedDefaults, LockedOptions, MergedLockedOptions } from './locked.options.js';

/** @internal Metadata on a decorated method, for the explorer. */
export const LOCKED_METADATA = 'redis-lock:locked';

/** @internal Which parameters of a method `@Locked()` fills in once the lock is held. */
export const LOCK_PARAMS_METADATA = 'redis-lock:params';

/** A parameter that `@CurrentLock()`, `@FencingToken()` or `@LockSignal()` fills in. */
export interface LockParam {
  readonly index: number;
  /** The parameter decorator's name, for messages: `FencingToken`. */
  readonly decorator: string;
  readonly pick: (lock: Lock) => unknown;
}

/** What RedisLockModule installs on the classes whose methods are locked. */
export interface LockedRuntime {
  readonly engine: LockEngine;
  readonly defaults: LockedDefaults;
}

/** @internal The property (on instances and prototypes) that holds the runtime. */
export const LOCKED_RUNTIME = Symbol('redis-lock.runtime');

/**
 * What a decorated method holds while it runs: the resource's exclusive lock
 * (`@Locked()`), a read or a write hold of its read-write lock
 * (`@Locked(key, { mode })`), or a permit of a semaphore (`@Limited()`).
 */
export type LockedHoldKind = 'lock' | 'read' | 'write' | 'permit';

/** What `@Locked()` knows of the method it decorated, from the decoration on. */
export interface LockedMethod {
  readonly where: string;
  /** The decorator, as messages name it: `Locked` or `Limited`. */
  readonly decorator: string;
  readonly key: CompiledLockKey;
  /** What the method holds while it runs. */
  readonly kind: LockedHoldKind;
  /** A semaphore's permits (`@Limited()` only). */
  readonly permits?: number;
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
  /**
   * Whether it returns an Observable, held until the stream ends: declared so,
   * or an `@Sse()` handler (whose return type may be left to inference). Known
   * at the first call, for the same reason.
   */
  streams?: boolean;
  /** Its options merged with the defaults of the application that called it last. */
  merged?: { readonly defaults: LockedDefaults; readonly options: MergedLockedOptions };
}
