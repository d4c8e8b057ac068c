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
import { LockClosingError, LockError } from '../../engine/index.js';
import {
  GRAPHQL_CONTEXT_ARG,
  isServerSideLockFailure,
  lockGraphQLErrorBody,
} from './graphql-lock-failures.js';
import {
  attachRequestLocks,
  getRequestLocks,
  lockStorage,
  RequestLocks,
  type LockFrame,
} from './lock-context.js';
import { isLockFailure, lockFailureBody, retryAfterSeconds, wasLogged } from './lock-failures.js';
import { LockKeyError } from '../locked/locked.errors.js';

const handle = (next: CallHandler): Observable<unknown> => next.handle();

/**
 * Gives every handler a lock context: the locks taken while handling the
 * request are attached to it (read them with `getRequestLocks()`), and a
 * lock that `@Locked()` could not take becomes the transport's answer:
 * HTTP 409 Conflict with a `Retry-After` header when busy, 503 when the
 * nodes are unreachable, 400 for a key argument that cannot make a key;
 * an RpcException or WsException carrying the same body elsewhere. In a
 * GraphQL resolver every LockError becomes a GraphQLError whose
 * `extensions` carry its `code` (and `retryAfter` in seconds when busy). The
 * handler's own errors pass through untouched.
 *
 * RedisLockModule registers it for every handler unless
 * `contextInterceptor: false`; then apply it with `@UseInterceptors()`.
 * Subclass it and override {@link toTransportError} (or
 * {@link toGraphQLError}) to answer differently.
 */
@Injectable()
export class LockContextInterceptor implements NestInterceptor {
  protected readonly logger = new Logger('RedisLock');

  constructor(@Optional() protected readonly adapterHost?: HttpAdapterHost) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const carrier = this.requestOf(context);
    // The root fields of one GraphQL operation are resolved one interceptor call each, all
    // with the operation's context: they share its list instead of replacing each other's.
    let locks = context.getType<string>() === 'graphql' ? getRequestLocks(carrier) : undefined;
    if (!locks) {
      locks = new RequestLocks();
      if (carrier) attachRequestLocks(carrier, locks);
    }
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
          if (!this.answers(error, context)) return subscriber.error(error);
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

  /**
   * Whether `error` is the interceptor's to answer: a lock that `@Locked()` or
   * LockService could not take. In a GraphQL resolver, any LockError: a
   * GraphQL response shows the client the message of whatever a resolver
   * throws, and a LockError's message names resources.
   */
  protected answers(error: unknown, context: ExecutionContext): error is LockError {
    return (
      isLockFailure(error) ||
      (error instanceof LockError && context.getType<string>() === 'graphql')
    );
  }

  /**
   * The object a request's locks are attached to: HTTP request, RPC context,
   * WebSocket client, GraphQL context.
   */
  protected requestOf(context: ExecutionContext): object | undefined {
    // What switchToHttp().getRequest(), switchToRpc().getContext(), switchToWs().getClient() and
    // GqlExecutionContext.getContext() return, without the closures each switchTo*() call adds
    // to the context, and without loading @nestjs/graphql.
    const type = context.getType<string>();
    const carrier = context.getArgByIndex<unknown>(
      type === 'rpc' ? 1 : type === 'graphql' ? GRAPHQL_CONTEXT_ARG : 0,
    );
    return typeof carrier === 'object' && carrier !== null ? carrier : undefined;
  }

  /** Turns a lock failure of `@Locked()` into what the transport answers. */
  protected async toTransportError(error: LockError, context: ExecutionContext): Promise<unknown> {
    if (context.getType<string>() === 'graphql') return this.toGraphQLError(error, context);
    const body = lockFailureBody(error);
    if (!body) return error;
    // The client hears little; the operator hears what it needs to act.
    // LockService logs outages itself unless its `logging` is off.
    if (body.statusCode === 503) this.logOutage(error);
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

  /**
   * The GraphQLError a resolver's lock failure becomes, with `extensions.code`
   * and, when busy, `extensions.retryAfter` (seconds). The LockError is its
   * `originalError`, for server-side error formatters and plugins.
   */
  protected async toGraphQLError(error: LockError, _context: ExecutionContext): Promise<unknown> {
    if (isServerSideLockFailure(error)) this.logOutage(error);
    else if (error instanceof LockKeyError) this.logger.warn(error.message);
    const { message, extensions } = lockGraphQLErrorBody(error);
    // Loaded here, on the first GraphQL lock failure: only GraphQL apps have the package.
    const { GraphQLError } = await import('graphql');
    return new GraphQLError(message, { extensions, originalError: error });
  }

  /**
   * A server-side failure, as an error, unless the service's logger reported
   * it already. A refusal during shutdown is the drain at work, not an
   * outage: the service's logger notes the first one.
   */
  private logOutage(error: LockError): void {
    if (!wasLogged(error) && !(error instanceof LockClosingError)) this.logger.error(error.message);
  }

  protected setRetryAfter(context: ExecutionContext, retryAfterMs: number): void {
    const adapter = this.adapterHost?.httpAdapter;
    const response = context.switchToHttp().getResponse<{ raw?: object } | undefined>();
    // A stream (SSE) has sent its headers before the lock answered: its client gets an error event.
    const raw = (response?.raw ?? response) as { headersSent?: boolean } | undefined;
    if (adapter && response && !raw?.headersSent)
      adapter.setHeader(response, 'Retry-After', String(retryAfterSeconds(retryAfterMs)));
  }
}
