import { setTimeout as sleep } from 'node:timers/promises';
import type { CallRequest } from './call-request.js';
import type { EngineContext } from './engine-context.js';
import type { Lock } from './lock.js';
import {
  LockAbortedError,
  LockBusyError,
  LockClosingError,
  type LockError,
  LockOptionsError,
  LockTimeoutError,
  LockUnavailableError,
} from './lock-errors.js';
import type { NodeResults } from './lock-events.js';
import { roundFailures, type RoundResult } from './quorum-round.js';
import { retryDelay } from './retry-delay.js';
import type { ReleaseWatch, Ticket } from './wait-queue.js';

/** An attempt that produced a lock, with the round that granted it (for the events). */
export interface Grant {
  readonly lock: Lock;
  readonly round: RoundResult<unknown>;
}

/** Why an attempt did not produce a lock. */
export interface Refusal {
  /** Enough nodes answered and someone holds it (or the line is ahead); otherwise unavailable. */
  readonly busy: boolean;
  /** When busy: ms until enough nodes are free at the latest. */
  readonly retryAfter: number | undefined;
  /** Ask again at once: a split vote taught it what to ask for (a semaphore's slot). */
  readonly again: boolean;
  readonly error: () => LockUnavailableError;
  readonly round: RoundResult<unknown>;
}

/** What a primitive (a lock, a read-write lock, a semaphore) plugs into the loop. */
export interface Acquirer<R extends CallRequest> {
  /** One attempt on every node. */
  attempt(request: R): Promise<Grant | Refusal>;
  /** Takes the acquisition out of the nodes' lines it joined (best effort). */
  leaveLines(request: R): void;
}

/** The counts of a round, as the events report them. */
export const nodeResults = (round: RoundResult<unknown>): NodeResults => ({
  granted: round.yes,
  denied: round.no,
  failed: round.failed,
});

/**
 * Waits for a grant per the request's retry policy: LockBusyError after a
 * single refused attempt, LockTimeoutError when it stays busy,
 * LockUnavailableError when too few nodes answer for `unavailableTimeout`.
 *
 * Callers of this process that share a queue wait first come first served,
 * and the head asks again as soon as a release is heard (the engine's own
 * release, or one from another process through the release channel), with
 * the retry delay as a fallback.
 */
export async function acquireWith<R extends CallRequest>(
  context: EngineContext,
  request: R,
  acquirer: Acquirer<R>,
): Promise<Lock> {
  const { started } = request;
  const deadline = started + request.waitTimeout;
  let ticket: Ticket | undefined;
  let acquired = false;
  let watch: ReleaseWatch | undefined;
  /** When the attempts in a row that found too few nodes began. */
  let unavailableSince: number | undefined;
  try {
    const { queueId } = request;
    if (request.retry.attempts > 0 && queueId !== undefined && context.queues.has(queueId)) {
      // Others of this process already wait for these keys: line up behind them. Promoted
      // after the one ahead got the lock, wait for its release (this process's own, which
      // wakes the head at once), with the first retry delay as the fallback: asking at once
      // would only be refused, and a short hold's release would race that refusal.
      ticket = await lineUp(context, request);
      await waitTurn(context, ticket, retryDelay(request.retry, 1), deadline, request, 0);
    }
    for (let attempt = 1; ; attempt++) {
      ticket?.attempting();
      // Outside a queue, a release heard during the attempt wakes nobody: noted here instead.
      watch?.end();
      // (A single attempt never waits: nothing to note. Nor does one that does not hear every
      // release of its keys, such as the first on a fresh key: without a watch it asks again at
      // once if refused, as a watch would have told it to.)
      watch =
        ticket ||
        request.retry.attempts === 0 ||
        !(context.channel?.listening(request.keys) ?? false)
          ? undefined
          : context.queues.watch(request.keys, () => request.waiter);
      let outcome: Grant | Refusal;
      try {
        outcome = await acquirer.attempt(request);
      } catch (error) {
        throw context.failed(request, attempt, error as LockError);
      }
      if (ticket) ticket.waiter = request.waiter;
      if ('lock' in outcome) {
        const { lock, round } = outcome;
        request.granting = round;
        if (context.closing.aborted) {
          // Granted while the engine began to shut down: nothing may start under it now.
          await lock.release();
          throw context.failed(request, attempt, new LockClosingError(request.resources));
        }
        acquired = true;
        context.granted(request, lock, attempt, round);
        return lock;
      }
      const now = performance.now();
      if (outcome.busy) unavailableSince = undefined;
      else unavailableSince ??= now;
      const outage =
        unavailableSince === undefined
          ? Infinity
          : unavailableSince + request.unavailableTimeout - now;
      if (outage <= 0)
        throw context.failed(request, attempt, outcome.error(), nodeResults(outcome.round));
      if (attempt > request.retry.attempts || now >= deadline) {
        const nodes = nodeResults(outcome.round);
        if (!outcome.busy) throw context.failed(request, attempt, outcome.error(), nodes);
        // A call that may wait gave up waiting, even when its wait ran out during the first
        // attempt (a slow round): LockBusyError is the answer of a single attempt by design.
        const error =
          request.retry.attempts === 0
            ? new LockBusyError(request.resources, outcome.retryAfter, request.busyMessage)
            : new LockTimeoutError(request.resources, outcome.retryAfter, attempt, now - started);
        throw context.failed(request, attempt, error, nodes);
      }
      if (outcome.busy) context.contended(request, attempt, outcome.retryAfter, outcome.round);
      // In the nodes' lines and hearing every node's releases, the waiter is woken by the release
      // that names it: the delay is only a fallback (a message lost in a reconnect) and renews its
      // place, so it is the policy's longest. A shorter one asks before its turn, only to be
      // refused: a round to every node.
      const named = outcome.busy && request.inLine && context.channel?.listening(request.keys);
      let delay = retryDelay(request.retry, named ? Infinity : attempt);
      // A holder that crashed frees the lock when its lease ends; no need to sleep past that.
      if (outcome.retryAfter !== undefined) delay = Math.min(delay, outcome.retryAfter + 1);
      if (outcome.again) delay = 0;
      if (!outcome.busy) {
        await pause(context, Math.min(delay, deadline - now, outage), request, attempt);
      } else if (!ticket) {
        ticket = await lineUp(context, request);
        // The refused attempt took its place in the nodes' lines. The head asks again now only
        // when a release may have gone unheard (during the attempt, or before the subscription
        // was in place); otherwise it waits for the release that names it.
        const askNow = ticket.isHead && watch?.end() !== false;
        if (!askNow) await waitTurn(context, ticket, delay, deadline, request, attempt);
      } else {
        await waitTurn(context, ticket, delay, deadline, request, attempt);
      }
    }
  } finally {
    watch?.end();
    if (ticket) {
      ticket.leave(acquired);
      context.channel?.unsubscribe(request.keys);
    }
    if (request.inLine) acquirer.leaveLines(request);
  }
}

/**
 * Why an attempt failed, from its round: busy (enough nodes answered, someone
 * holds it) or unavailable. `wait` reads a node's reply: undefined for a
 * grant, else ms until the holders in the way are gone (negative when unknown).
 */
export function refusalOf<T>(
  context: EngineContext,
  round: RoundResult<T>,
  request: CallRequest,
  wait: (reply: T) => number | undefined,
): Refusal {
  const { nodes, quorum } = context;
  const error = () =>
    new LockUnavailableError(
      request.resources,
      round.yes >= quorum
        ? [
            {
              node: 'quorum',
              error: new Error(
                'granted, but the grant or its fencing round ended too late to leave any validity (nodes too slow)',
              ),
            },
          ]
        : roundFailures(nodes, round.errors),
      quorum,
      nodes.length,
    );
  // Unavailable when too many nodes failed for a quorum even if every other one granted, or
  // when nobody denied (a late grant). Otherwise a holder stood in the way: busy, even if the
  // round stopped before the nodes still pending could deny too.
  if (round.failed > nodes.length - quorum || round.no === 0)
    return { busy: false, retryAfter: undefined, again: false, error, round };
  // The lock can be had once `quorum` nodes are free: those that granted us now, plus the
  // refusing nodes in the order their holders' leases run out (the last known one when the
  // round stopped early).
  const waits: number[] = [];
  for (const reply of round.replies) {
    const ms = reply === undefined ? undefined : wait(reply);
    if (ms !== undefined) waits.push(ms);
  }
  waits.sort((a, b) => a - b);
  const lease = waits[Math.min(Math.max(0, quorum - round.yes - 1), waits.length - 1)];
  return {
    busy: true,
    retryAfter: lease !== undefined && lease >= 0 ? lease : undefined,
    again: false,
    error,
    round,
  };
}

/** Joins this process's queue for the request and listens for its keys' releases. */
async function lineUp(context: EngineContext, request: CallRequest): Promise<Ticket> {
  request.waiting = true;
  const ticket = context.queues.join(
    request.queueId ?? `${request.keys.join('\n')}\n${request.waiter}`,
    request.keys,
    request.arrival,
  );
  ticket.waiter = request.waiter;
  await context.channel?.subscribe(request.keys, request.nodeTimeout);
  return ticket;
}

async function waitTurn(
  context: EngineContext,
  ticket: Ticket,
  delay: number,
  deadline: number,
  request: CallRequest,
  attempts: number,
): Promise<void> {
  try {
    await ticket.wait(delay, deadline, waitSignal(context, request));
  } catch {
    throw context.failed(request, attempts, stoppedWaiting(context, request));
  }
}

async function pause(
  context: EngineContext,
  ms: number,
  request: CallRequest,
  attempts: number,
): Promise<void> {
  request.waiting = true;
  try {
    await sleep(ms, undefined, { signal: waitSignal(context, request) });
  } catch {
    throw context.failed(request, attempts, stoppedWaiting(context, request));
  }
}

/**
 * The signal a wait listens to: the caller's, and the engine's shutdown. One of
 * the request's own: many waiters listening on the engine's shutdown signal
 * itself would pass its listener limit (a warning); AbortSignal.any holds it weakly.
 */
function waitSignal(context: EngineContext, request: CallRequest): AbortSignal {
  request.waitSignal ??= AbortSignal.any(
    request.signal ? [request.signal, context.closing] : [context.closing],
  );
  return request.waitSignal;
}

/** Why a wait ended early: the engine shuts down, or the caller aborted. */
function stoppedWaiting(context: EngineContext, request: CallRequest): LockError {
  return context.closing.aborted
    ? new LockClosingError(request.resources)
    : new LockAbortedError(request.resources, request.signal?.reason);
}

/** Refuses an attempt before it starts: the engine is closed or draining, or the caller aborted. */
export function checkCanAttempt(context: EngineContext, request: CallRequest): void {
  if (context.isClosed())
    throw new LockOptionsError('The lock engine is closed; locks can no longer be taken with it.');
  if (context.closing.aborted) throw new LockClosingError(request.resources);
  if (request.signal?.aborted) throw new LockAbortedError(request.resources, request.signal.reason);
}
