import {
  LockBusyError,
  LockError,
  LockTimeoutError,
  LockUnavailableError,
} from '../../engine/index.js';
import { LockKeyError } from '../locked/locked.errors.js';

/**
 * Errors raised while taking a lock through the Nest layer (LockService or
 * `@Locked()`), as opposed to errors the application's own code threw. Only
 * these become 409 / 503 / 400 answers in the lock-context interceptor. (A
 * GraphQL response shows clients the message of any error a resolver lets
 * through, so there every LockError is answered; see graphql-lock-failures.ts.)
 */
const lockFailures = new WeakSet<object>();

/** Marks `error` as a failure to lock (so the interceptor and filters know it for one). */
export function markLockFailure<T>(error: T): T {
  if (typeof error === 'object' && error !== null) lockFailures.add(error);
  return error;
}

/**
 * True for an error raised while taking a lock, not one the application threw;
 * narrows `error` to LockError, so that `lockFailureBody(error)` can follow.
 */
export function isLockFailure(error: unknown): error is LockError {
  return error instanceof LockError && lockFailures.has(error);
}

/** Failures the service's logger has reported already, so the interceptor does not log them twice. */
const loggedFailures = new WeakSet<object>();

/** @internal */
export function markLogged(error: object): void {
  loggedFailures.add(error);
}

/** @internal */
export function wasLogged(error: unknown): boolean {
  return typeof error === 'object' && error !== null && loggedFailures.has(error);
}

/** The body of a lock failure as an HTTP, RPC or WebSocket client sees it. */
export interface LockFailureBody {
  statusCode: 400 | 409 | 503;
  error: string;
  code: string;
  message: string;
  /** Ms until the holder's lease ends, when busy. */
  retryAfter?: number;
}

/**
 * The client-facing body of a lock failure; undefined for errors that are not
 * the client's concern. It names no resource, class or template: those go to
 * the server's log.
 */
export function lockFailureBody(error: unknown): LockFailureBody | undefined {
  if (error instanceof LockBusyError) {
    const retry =
      error.retryAfter === undefined ? '' : ` Retry in ${retryAfterSeconds(error.retryAfter)} s.`;
    const message =
      error instanceof LockTimeoutError
        ? `Busy: another request kept this resource locked for longer than the wait allows.${retry}`
        : `Busy: another request holds the lock on this resource.${retry}`;
    return {
      statusCode: 409,
      error: 'Conflict',
      code: error.code,
      message,
      retryAfter: error.retryAfter,
    };
  }
  if (error instanceof LockUnavailableError) {
    return {
      statusCode: 503,
      error: 'Service Unavailable',
      code: error.code,
      message: 'The lock service is unavailable; try again later.',
    };
  }
  if (error instanceof LockKeyError) {
    return {
      statusCode: 400,
      error: 'Bad Request',
      code: error.code,
      message: error.publicMessage,
    };
  }
  return undefined;
}

/** A lease in ms as the whole seconds to wait, never 0, as an HTTP `Retry-After` header says it. */
export function retryAfterSeconds(ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000));
}
