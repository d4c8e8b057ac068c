import type { Lock, ReleaseResult } from './lock.js';
import type { LockError } from './lock-errors.js';
import type { NodeResults } from './lock-events.js';
import type { LockNode } from './lock-node.js';
import type { ResolvedEngineOptions, ResolvedRetry, RetryOptions } from './lock-options.js';
import type { RoundResult } from './quorum-round.js';
import type { ReleaseChannel } from './release-channel.js';
import type { WaitQueues } from './wait-queue.js';

/** An acquisition as the events and the failure report name it. */
export interface Asking {
  readonly resources: readonly string[];
  readonly started: number;
  readonly waiting: boolean;
}

/**
 * What the parts of an engine share, read-only: its nodes, options and timing
 * rules, its restart watch, its waiters' queues and release channel, its
 * shutdown, and the hooks that keep its books (held locks, events). Built once
 * by the engine; the acquisition loop, the lock's attempts, read-write locks
 * and semaphores run on it instead of reaching into the engine.
 */
export interface EngineContext {
  readonly nodes: readonly LockNode[];
  /** floor(n / 2) + 1 */
  readonly quorum: number;
  readonly options: ResolvedEngineOptions;
  /** Checks a resource name as the engine does; returns it. */
  resourceName(resource: string): string;
  /** The lock key of a resource, `<keyPrefix>{<resource>}`. */
  lockKey(resource: string): string;
  /** The key of a node's one fence counter for all resources. */
  readonly nodeCounterKey: string;
  /** True where a node counts the tokens of all resources with one counter (`fenceCounter: 'node'`). */
  countsForAll(node: LockNode): boolean;
  /** The fence counter this node uses for a lock key, and its TTL (0: none). */
  counter(node: LockNode, lockKey: string): { readonly key: string; readonly ttl: number };
  /** How long a round waits for a node, for a lease of `ttl` ms. */
  nodeTimeout(ttl: number): number;
  /** The clock drift allowed for a lease of `ttl` ms. */
  drift(ttl: number): number;
  /** Records a lease length asked for: a restarted node may have forgotten one that long. */
  noteTtl(ttl: number): void;
  /** Now, in epoch ms on the nodes' clock: a waiter's place in the nodes' lines. */
  arrival(): number;
  /** Why node i's grants must not count now (a restart without persistence), or undefined. */
  excluded(i: number): string | undefined;
  /** While node i's restart is being checked: resolves once known. */
  pending(i: number): Promise<unknown> | undefined;
  readonly queues: WaitQueues;
  /** Hears releases from other processes; undefined when notifications are off. */
  readonly channel: ReleaseChannel | undefined;
  /** The release scripts' notify argument. */
  readonly notify: '1' | '0';
  /** Names this engine in its release messages, so that it skips its own. */
  readonly sender: string;
  /** Aborted once the engine drains or closes: no new grants, waiters stop waiting. */
  readonly closing: AbortSignal;
  isClosed(): boolean;
  /** A call's retry options over the engine's, resolved once per options object. */
  retryPolicy(retry: RetryOptions): ResolvedRetry;
  /** Reports a failed acquisition (events; the Nest layer tags the error). */
  failed(request: Asking, attempts: number, error: LockError, nodes?: NodeResults): LockError;
  /** Books a grant: held until released or lost (a drain waits for it), and its events. */
  granted(request: Asking, lock: Lock, attempts: number, round: RoundResult<unknown>): void;
  /** A busy attempt that will be retried, for the `contended` event. */
  contended(
    request: Asking,
    attempt: number,
    retryAfter: number | undefined,
    round: RoundResult<unknown>,
  ): void;
  /** A renewal that a quorum counted, for the `extended` event. */
  extended(lock: Lock, started: number, round: RoundResult<unknown>, ttl: number): void;
  /** A release done on the nodes: warnings for the nodes it missed, the event, and the books. */
  released(lock: Lock, result: ReleaseResult, started: number, round: RoundResult<unknown>): void;
  /** A held lock that was lost: the books and the event. */
  lost(lock: Lock, error: LockError): void;
}
