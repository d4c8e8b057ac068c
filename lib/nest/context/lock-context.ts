import { Injectable } from '@nestjs/common';
import { AsyncLocalStorage } from 'node:async_hooks';
import { Permit, ReadWriteHold, type Lock, type LockEngine } from '../../engine/index.js';

/**
 * The locks taken while handling one request (HTTP request, RPC message or
 * WebSocket message), in the order they were granted. The lock-context
 * interceptor attaches it to the request; read it with {@link getRequestLocks}.
 */
export class RequestLocks {
  readonly locks: Lock[] = [];

  /** The lock granted last, if any. */
  get lock(): Lock | undefined {
    return this.locks.at(-1);
  }

  /** The fencing token of the lock granted last. */
  get token(): number | undefined {
    return this.lock?.token;
  }
}

/**
 * What the code running under `@Locked()` can see; one frame per locked call,
 * plus one per request (the lock-context interceptor's, with no lock of its own).
 * The frames of one call chain link outwards, so a locked call adds one small
 * object instead of copying what its callers hold.
 */
export interface LockFrame {
  /** The engine that granted `lock`, so re-entrancy never mixes two applications' locks. */
  readonly engine: LockEngine | undefined;
  /** The innermost lock. */
  readonly lock: Lock | undefined;
  /** The frame of the enclosing lock granted by the same engine; undefined at the outermost. */
  readonly outer: LockFrame | undefined;
  readonly request: RequestLocks | undefined;
}

/** @internal The one store shared by the decorator, the interceptor and LockContext. */
export const lockStorage = new AsyncLocalStorage<LockFrame>();

/**
 * @internal What a hold is: a lock, a read or a write hold of a read-write
 * lock, or a semaphore's permit. Each kind is a primitive of its own in Redis,
 * so a name held one way is not held another.
 */
export function holdKindOf(lock: Lock): 'lock' | 'read' | 'write' | 'permit' {
  if (lock instanceof ReadWriteHold) return lock.mode;
  return lock instanceof Permit ? 'permit' : 'lock';
}

/**
 * @internal The hold of `resource` for the chain of `frame` that `accepts`
 * takes: the innermost such one (granted by `frame.engine`), held or not. By
 * default, an exclusive lock.
 */
export function lockOf(
  frame: LockFrame | undefined,
  resource: string,
  accepts: (lock: Lock) => boolean = isExclusive,
): Lock | undefined {
  for (let f = frame; f?.lock; f = f.outer) {
    if (f.lock.resources.includes(resource) && accepts(f.lock)) return f.lock;
  }
  return undefined;
}

const isExclusive = (lock: Lock) => holdKindOf(lock) === 'lock';

/**
 * @internal Every lock of the chain of `frame`, outermost first; an inner
 * grant of a resource (of the same kind) replaces the outer one.
 */
export function locksOf(frame: LockFrame | undefined): Lock[] {
  const frames: LockFrame[] = [];
  for (let f = frame; f?.lock; f = f.outer) frames.push(f);
  const byResource = new Map<string, Lock>();
  for (let i = frames.length - 1; i >= 0; i--) {
    const lock = frames[i].lock!;
    const kind = holdKindOf(lock);
    for (const resource of lock.resources) byResource.set(`${kind} ${resource}`, lock);
  }
  return [...new Set(byResource.values())];
}

const REQUEST_LOCKS = Symbol('redis-lock.request-locks');

/**
 * @internal Attaches the request's lock list to the transport's request object,
 * under a symbol (a plain assignment: `Object.defineProperty` costs about
 * twenty times as much, on every request).
 */
export function attachRequestLocks(request: object, locks: RequestLocks): void {
  (request as { [REQUEST_LOCKS]?: RequestLocks })[REQUEST_LOCKS] = locks;
}

/**
 * The locks taken while handling `request`: the HTTP request object (Express
 * or Fastify), the RPC context, or the WebSocket client. Undefined when the
 * lock-context interceptor did not run for it.
 *
 * @example
 * catch(exception: unknown, host: ArgumentsHost) {
 *   const locks = getRequestLocks(host.switchToHttp().getRequest());
 * }
 */
export function getRequestLocks(request: unknown): RequestLocks | undefined {
  return typeof request === 'object' && request !== null
    ? (request as { [REQUEST_LOCKS]?: RequestLocks })[REQUEST_LOCKS]
    : undefined;
}

/**
 * The lock(s) held by the current call chain, from anywhere below a
 * `@Locked()` method: inject it, or use its static methods.
 *
 * @example
 * constructor(private readonly lockContext: LockContext) {}
 * save(order: Order) {
 *   return this.repo.update(order, { fence: this.lockContext.token });
 * }
 */
@Injectable()
export class LockContext {
  /** The innermost lock of the current call chain. */
  static get lock(): Lock | undefined {
    return lockStorage.getStore()?.lock;
  }

  /** Its fencing token. */
  static get token(): number | undefined {
    return lockStorage.getStore()?.lock?.token;
  }

  /** Its signal: aborts when the lock is lost. */
  static get signal(): AbortSignal | undefined {
    return lockStorage.getStore()?.lock?.signal;
  }

  /** Every lock held by the current call chain, outermost first. */
  static get locks(): Lock[] {
    return locksOf(lockStorage.getStore());
  }

  /** The locks of the current request, when the interceptor runs. */
  static get request(): RequestLocks | undefined {
    return lockStorage.getStore()?.request;
  }

  get lock(): Lock | undefined {
    return LockContext.lock;
  }

  get token(): number | undefined {
    return LockContext.token;
  }

  get signal(): AbortSignal | undefined {
    return LockContext.signal;
  }

  get locks(): Lock[] {
    return LockContext.locks;
  }

  get request(): RequestLocks | undefined {
    return LockContext.request;
  }
}
