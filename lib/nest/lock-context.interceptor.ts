import {
  BadRequestException,
  ConflictException,
  Injectable,
  Logger,
  Optional,
  ServiceUnavailableException,
  type CallHandler,
  type ExecutionContext,
  type NestInterceptor,
} from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { Observable } from 'rxjs';
import {
  LockBusyError,
  LockTimeoutError,
  LockUnavailableError,
  type LockError,
} from '../engine/index.js';
import { attachRequestLocks, lockStorage, RequestLocks, type LockFrame } from './lock-context.js';
import { isLockFailure, wasLogged } from './lock-failures.js';
import { LockKeyError } from './locked-errors.js';

/** The body of a lock failure as a client sees it, on every transport. */
export interface LockFailureBody {
  statusCode: 400 | 409 | 503;
  error: string;
  code: string;
  message: string;
  /** Ms until the holder's lease ends, when busy. */
  retryAfter?: number;
}

const handle = (next: CallHandler): Observable<unknown> => next.handle();

/**
 * Gives every handler a lock context: the locks taken while handling the
 * request are attached to it (read them with `getRequestLocks()`), and a
 * lock that `@Locked()` could not take becomes the transport's answer:
 * HTTP 409 Conflict with a `Retry-After` header when busy, 503 when the
 * nodes are unreachable, 400 for a key argument that cannot make a key;
 * an RpcException or WsException carrying the same body elsewhere. The
 * handler's own errors pass through untouched.
 *
 * RedisLockModule registers it for every handler unless
 * `contextInterceptor: false`; then apply it with `@UseInterceptors()`.
 * Subclass it and override {@link toTransportError} to answer differently.
 */
@Injectable()
export class LockContextInterceptor implements NestInterceptor {
  protected readonly logger = new Logger('RedisLock');

  constructor(@Optional() protected readonly adapterHost?: HttpAdapterHost) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const locks = new RequestLocks();
    const carrier = this.requestOf(context);
    if (carrier) attachRequestLocks(carrier, locks);
    const parent = lockStorage.getStore();
    // The request's frame carries the enclosing call chain's locks (if any) unchanged.
    const frame: LockFrame = {
      engine: parent?.engine,
      lock: parent?.lock,
      outer: parent?.outer,
      request: locks,
    };
    const handled = lockStorage.run(frame, handle, next);
    // One plain Observable instead of rxjs operators: this runs for every handler of the app.
    return new Observable((subscriber) =>
      handled.subscribe({
        next: (value) => subscriber.next(value),
        error: (error: unknown) => {
          if (!isLockFailure(error)) return subscriber.error(error);
          // A subclass's toTransportError may throw, or not be async: settle it either way.
          new Promise((resolve) =>
            resolve(this.toTransportError(error as LockError, context)),
          ).then(
            (mapped) => subscriber.error(mapped),
            (mappingError: unknown) => subscriber.error(mappingError),
          );
        },
        complete: () => subscriber.complete(),
      }),
    );
  }

  /** The object a request's locks are attached to: HTTP request, RPC context, WebSocket client. */
  protected requestOf(context: ExecutionContext): object | undefined {
    // What switchToHttp().getRequest(), switchToRpc().getContext() and switchToWs().getClient()
    // return, without the closures each switchTo*() call adds to the context.
    const carrier = context.getArgByIndex<unknown>(context.getType<string>() === 'rpc' ? 1 : 0);
    return typeof carrier === 'object' && carrier !== null ? carrier : undefined;
  }

  /** Turns a lock failure of `@Locked()` into what the transport answers. */
  protected async toTransportError(error: LockError, context: ExecutionContext): Promise<unknown> {
    const body = lockFailureBody(error);
    if (!body) return error;
    // The client hears little; the operator hears what it needs to act.
    // LockService logs outages itself unless its `logging` is off.
    if (body.statusCode === 503 && !wasLogged(error)) this.logger.error(error.message);
    else if (body.statusCode === 400) this.logger.warn(error.message);
    const type = context.getType<string>();
    if (type === 'http') {
      if (body.retryAfter !== undefined) this.setRetryAfter(context, body.retryAfter);
      const options = { cause: error };
      if (body.statusCode === 409) return new ConflictException(body, options);
      if (body.statusCode === 503) return new ServiceUnavailableException(body, options);
      return new BadRequestException(body, options);
    }
    if (type === 'rpc') {
      const { RpcException } = await import('@nestjs/microservices');
      return new RpcException(body);
    }
    if (type === 'ws') {
      const { WsException } = await import('@nestjs/websockets');
      return new WsException(body);
    }
    return error;
  }

  protected setRetryAfter(context: ExecutionContext, retryAfterMs: number): void {
    const adapter = this.adapterHost?.httpAdapter;
    const response = context.switchToHttp().getResponse<unknown>();
    if (adapter && response)
      adapter.setHeader(
        response,
        'Retry-After',
        String(Math.max(1, Math.ceil(retryAfterMs / 1000))),
      );
  }
}

/**
 * The client-facing body of a lock failure; undefined for errors that are not
 * the client's concern. It names no resource, class or template: those go to
 * the server's log.
 */
export function lockFailureBody(error: LockError): LockFailureBody | undefined {
  if (error instanceof LockBusyError) {
    const retry =
      error.retryAfter === undefined
        ? ''
        : ` Retry in ${Math.max(1, Math.ceil(error.retryAfter / 1000))} s.`;
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
