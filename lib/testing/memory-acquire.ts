/**
 * The in-memory engine's attempts loop, shared by its locks and by its
 * read-write locks and semaphores: the real engine's schedule (the retry
 * delay, cut short when the holder's lease ends first), the simulated line
 * (first come, first served), and its errors (LockBusyError after a single
 * refused attempt, LockTimeoutError once the wait is over, the attempt's own
 * error when too few nodes answer).
 */
import {
  callTimings,
  checkCallOptions,
  Lock,
  LockAbortedError,
  LockBusyError,
  LockTimeoutError,
  resolveRetry,
  retryDelay,
  type LockError,
  type LockUnavailableError,
  type NodeResults,
  type ResolvedEngineOptions,
  type ResolvedRetry,
  type UsingOptions,
} from '../engine/internal.js';
import {
  leaveLine,
  lineUp,
  pause,
  someoneAhead,
  type LineRequest,
  type WaitLine,
} from './memory-line.js';
import { drift } from './memory-nodes.js';

/** One acquisition, as the attempts loop tracks it. */
export interface MemoryRequest extends LineRequest {
  readonly resources: readonly string[];
  readonly ttl: number;
  readonly drift: number;
  readonly retry: ResolvedRetry;
  readonly waitTimeout: number;
}

/** Why an attempt did not produce a lock. */
export interface MemoryRefusal {
  /** Someone holds it; otherwise too few nodes answered (`error`). */
  readonly busy: boolean;
  /** When busy: ms until the holders in the way are gone, if known. */
  readonly retryAfter: number | undefined;
  /** Free on the nodes, but an earlier waiter stands first: try again as soon as woken. */
  readonly behindLine?: boolean;
  readonly error?: () => LockUnavailableError;
  readonly nodes?: NodeResults;
}

/** What a primitive plugs into the loop. */
export interface MemoryAcquirer<R extends MemoryRequest> {
  /** One attempt: the lock, or why not. Throws when it may not be made (closed, aborted). */
  attempt(request: R): Lock | MemoryRefusal;
  /** Reports a failed call (events) and returns its error. */
  failed(request: R, attempts: number, error: LockError, nodes?: NodeResults): LockError;
  /** After a grant. */
  granted(request: R, lock: Lock, attempts: number): void;
  /** After a busy refusal that will be retried. */
  contended?(request: R, attempts: number, refusal: MemoryRefusal): void;
  /** The first attempt's LockBusyError message, when the primitive words it its own way. */
  readonly busyMessage?: string;
}

/** Builds a request from a call's options (checked here) over the engine's. */
export function memoryRequest(
  options: ResolvedEngineOptions,
  resources: readonly string[],
  keys: readonly string[],
  call: UsingOptions,
): MemoryRequest {
  checkCallOptions(call);
  const timings = callTimings(call, options, (retry) =>
    resolveRetry('retry', retry, options.retry),
  );
  return {
    resources,
    keys,
    ttl: timings.ttl,
    drift: drift(options, timings.ttl),
    retry: timings.retry,
    waitTimeout: timings.waitTimeout,
    signal: call.signal,
    started: performance.now(),
    waiting: false,
    waiter: undefined,
  };
}

/** Attempts until a grant, per the request's retry policy, waiting in `line` meanwhile. */
export async function acquireInMemory<R extends MemoryRequest>(
  line: WaitLine,
  request: R,
  acquirer: MemoryAcquirer<R>,
): Promise<Lock> {
  const deadline = request.started + request.waitTimeout;
  let acquired = false;
  try {
    for (let attempt = 1; ; attempt++) {
      let outcome: Lock | MemoryRefusal;
      try {
        outcome = acquirer.attempt(request);
      } catch (error) {
        throw acquirer.failed(request, attempt, error as LockError);
      }
      if (outcome instanceof Lock) {
        acquired = true;
        acquirer.granted(request, outcome, attempt);
        return outcome;
      }
      const now = performance.now();
      if (attempt > request.retry.attempts || now >= deadline) {
        if (!outcome.busy && outcome.error)
          throw acquirer.failed(request, attempt, outcome.error(), outcome.nodes);
        const error =
          request.retry.attempts === 0
            ? new LockBusyError(request.resources, outcome.retryAfter, acquirer.busyMessage)
            : new LockTimeoutError(
                request.resources,
                outcome.retryAfter,
                attempt,
                now - request.started,
              );
        throw acquirer.failed(request, attempt, error, outcome.nodes);
      }
      if (outcome.busy) acquirer.contended?.(request, attempt, outcome);
      let delay = retryDelay(request.retry, attempt);
      if (outcome.retryAfter !== undefined) delay = Math.min(delay, outcome.retryAfter + 1);
      if (outcome.busy) {
        lineUp(line, request);
        // Refused only for the line, and first in it now that it stands there: ask at once.
        if (outcome.behindLine && !someoneAhead(line, request)) delay = 0;
      }
      await pause(Math.min(delay, deadline - now), request, (reason) =>
        acquirer.failed(request, attempt, new LockAbortedError(request.resources, reason)),
      );
    }
  } finally {
    if (request.waiter) leaveLine(line, request.waiter, acquired);
  }
}
