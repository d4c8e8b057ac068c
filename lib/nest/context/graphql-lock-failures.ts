import {
  LockAbortedError,
  LockBusyError,
  LockLostError,
  type LockError,
} from '../../engine/index.js';
import { lockFailureBody, retryAfterSeconds } from './lock-failures.js';
import { LockKeyError } from '../locked/locked.errors.js';

/**
 * Where a GraphQL resolver's ExecutionContext keeps the operation's context
 * (`getArgs()` is `[root, args, context, info]`): the object every resolver
 * of one operation shares, so the operation's locks are attached to it. Read
 * by position, so that no code path needs `@nestjs/graphql`.
 */
export const GRAPHQL_CONTEXT_ARG = 2;

/** What a GraphQL client is told about a lock failure: the error's message and extensions. */
export interface LockGraphQLErrorBody {
  message: string;
  extensions: {
    /** The error's `code`: `LOCK_BUSY`, `LOCK_TIMEOUT`, `LOCK_UNAVAILABLE`, `LOCK_LOST`, ... */
    code: string;
    /**
     * Seconds until the holder's lease ends, rounded up (what the HTTP
     * `Retry-After` header says); only when the lock was busy and the nodes
     * said how long.
     */
    retryAfter?: number;
  };
}

/**
 * How a lock failure reads in a GraphQL response: `extensions.code` is the
 * error's own code, one per error class, and the message names no resource,
 * class or template (those go to the server's log). Busy, unavailable and
 * key failures read as in the HTTP body.
 */
export function lockGraphQLErrorBody(error: LockError): LockGraphQLErrorBody {
  const extensions: LockGraphQLErrorBody['extensions'] = { code: error.code };
  if (error instanceof LockBusyError && error.retryAfter !== undefined)
    extensions.retryAfter = retryAfterSeconds(error.retryAfter);
  return { message: lockFailureBody(error)?.message ?? otherMessage(error), extensions };
}

function otherMessage(error: LockError): string {
  if (error instanceof LockLostError)
    return 'The lock on this resource was lost before the operation finished; its work may be incomplete.';
  if (error instanceof LockAbortedError) return 'Stopped waiting for the lock on this resource.';
  return 'The operation could not be locked because of an error on the server.';
}

/**
 * Whether the operator must hear of this failure from the interceptor: an
 * outage, or a lock the server could not set up. Not busy, a bad key (a
 * warning), an abort, or a lost lock (LockService's logging reports that
 * when it happens).
 */
export function isServerSideLockFailure(error: LockError): boolean {
  return !(
    error instanceof LockBusyError ||
    error instanceof LockKeyError ||
    error instanceof LockLostError ||
    error instanceof LockAbortedError
  );
}
