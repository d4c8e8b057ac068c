import { EventEmitter } from 'node:events';
import { acquireWith, nodeResults } from './acquisition.js';
import { callRequest, singleAttempt } from './call-request.js';
import { hideCredentials } from './credentials.js';
import type { Asking, EngineContext } from './engine-context.js';
import {
  reportAcquired,
  reportContended,
  reportExtended,
  reportFailed,
  reportLost,
  reportReleased,
} from './event-reports.js';
import { HeldLocks } from './held-locks.js';
import { Lock, type LockOwner, type ReleaseResult } from './lock.js';
import type { LockEvents, NodeResults } from './lock-events.js';
import { type LockError, type LockLostError, LockOptionsError } from './lock-errors.js';
import { LockAdmin, type LockHealth, type LockInspection } from './lock-admin.js';
import { LockAttempts, type LockRequest } from './lock-attempt.js';
import { LockNode } from './lock-node.js';
import {
  type AcquireOptions,
  type TryAcquireOptions,
  type LockEngineOptions,
  type ResolvedEngineOptions,
  type ResolvedRetry,
  type RetryOptions,
  type UsingOptions,
} from './lock-options.js';
import { checkMs, checkRoutine, resolveRetry } from './option-checks.js';
import { resolveEngineOptions } from './resolve-options.js';
import { leaseValue } from './lease-value.js';
import { extendLease, releaseLease } from './lease-rounds.js';
import { holdWhile } from './lease-renewal.js';
import { EXTEND, RELEASE } from './lua-scripts.js';
import { checkNodes } from './node-checks.js';
import { nodeClockOffset } from './node-clock.js';
import { restartWarning, RestartWatch, type NodeRestart } from './node-restarts.js';
import { LongestLease } from './longest-lease.js';
import type { RoundResult } from './quorum-round.js';
import { ReleaseChannel } from './release-channel.js';
import { normalizeResources } from './resource-names.js';
import { WaitQueues } from './wait-queue.js';
import { WarningLimiter } from './warning-limiter.js';

export { MAX_RESOURCE_LENGTH, normalizeResources, resourceProblem } from './resource-names.js';
export { hideCredentials } from './credentials.js';

/**
 * The framework-free lock engine: single-node locks when given one node,
 * Redlock with a majority quorum when given several, fencing tokens that stay
 * monotonic across that quorum, and automatic extension for `using()`.
 */
export class LockEngine extends EventEmitter<LockEvents> implements LockOwner {
  readonly options: ResolvedEngineOptions;
  readonly nodes: readonly LockNode[];
  /** floor(n / 2) + 1 */
  readonly quorum: number;
  /** @internal What the engine's parts (attempts, read-write locks, semaphores) share. */
  readonly context: EngineContext;
  private closed = false;
  /** Set by close() or drain(): no new locks, waiters stop waiting. */
  private draining = false;
  /** Aborted when draining begins: wakes every waiter. */
  private readonly closing = new AbortController();
  /** Locks granted by this engine and not yet released or lost, for a graceful shutdown. */
  private readonly held = new HeldLocks();
  private closingDown: Promise<void> | undefined;
  /** Warnings about the same node within a short time, folded into one. */
  private readonly warnings = new WarningLimiter((message) => this.options.logger.warn(message));
  private readonly queues = new WaitQueues();
  private readonly retryPolicies = new WeakMap<RetryOptions, ResolvedRetry>();
  /** Hears releases from other processes; undefined when notifications are off. */
  private readonly channel: ReleaseChannel | undefined;
  private readonly admin: LockAdmin;
  private readonly attempts: LockAttempts;
  /** The release script's notify argument. */
  private readonly notify: '1' | '0';
  /** Names this engine in its release messages, so that it skips its own (see RELEASE). */
  private readonly sender = leaseValue().slice(0, 12);
  /** Fencing with one counter per node for all resources (`fenceCounter: 'node'`), where a node can. */
  private readonly nodeCounters: boolean;
  /** The nodes' clock minus this process's (see nodeClockOffset), for waiters' arrivals. */
  private clockOffset = 0;
  /** Per node: whether its grants count toward a quorum after a restart. */
  private readonly restarts: readonly RestartWatch[];
  /** The longest lease on the nodes: what a restarted node may have forgotten. */
  private readonly longestLease: LongestLease;

  constructor(options: LockEngineOptions) {
    super();
    this.options = resolveEngineOptions(options);
    const sole = this.options.nodes.length === 1;
    this.nodes = this.options.nodes.map((spec, i) => {
      try {
        return LockNode.from(spec, sole);
      } catch (error) {
        // ioredis refuses some specs the checks above cannot foresee; never echo credentials.
        throw new LockOptionsError(
          `nodes[${i}] cannot be used: ${hideCredentials((error as Error).message)}. Check its URL or options.`,
        );
      }
    });
    this.quorum = Math.floor(this.nodes.length / 2) + 1;
    this.longestLease = new LongestLease(
      this.nodes,
      `${this.options.keyPrefix}longest-lease`,
      this.options.ttl,
    );
    const readTimeout = this.nodeTimeout(this.options.ttl);
    this.restarts = this.nodes.map(
      (node) =>
        new RestartWatch(node, this.longestLease, readTimeout, (restart) =>
          this.nodeRestarted(restart),
        ),
    );
    this.notify = this.options.releaseNotifications ? '1' : '0';
    this.nodeCounters = this.options.fencing && this.options.fenceCounter === 'node';
    this.admin = new LockAdmin(
      this.nodes,
      this.options.keyPrefix,
      this.quorum,
      this.nodeTimeout(this.options.ttl) * 5,
    );
    if (this.options.releaseNotifications) {
      this.channel = new ReleaseChannel(
        this.nodes,
        (key, head) => this.queues.released(key, head),
        this.sender,
        this.options.keyPrefix,
      );
    }
    this.context = this.makeContext();
    this.attempts = new LockAttempts(this.context, this);
  }

  /** The context the engine's parts run on: read-only views, and hooks into the books. */
  private makeContext(): EngineContext {
    const { admin, options } = this;
    return {
      nodes: this.nodes,
      quorum: this.quorum,
      options,
      resourceName: (resource) => normalizeResources(resource)[0],
      lockKey: (resource) => admin.lockKey(resource),
      nodeCounterKey: admin.nodeCounterKey,
      countsForAll: (node) => this.nodeCounters && node.keepsNodeCounter,
      counter: (node, lockKey) =>
        this.nodeCounters && node.keepsNodeCounter
          ? { key: admin.nodeCounterKey, ttl: 0 }
          : { key: `${lockKey}:fence`, ttl: options.fenceCounterTtl },
      nodeTimeout: (ttl) => this.nodeTimeout(ttl),
      drift: (ttl) => Math.floor(ttl * options.driftFactor) + 2,
      noteTtl: (ttl) => this.longestLease.note(ttl),
      // On the nodes' clock (comparable between processes whatever their own clocks say), finer
      // than a millisecond.
      arrival: () => performance.timeOrigin + performance.now() + this.clockOffset,
      excluded: (i) => this.restarts[i].excluded(),
      pending: (i) => this.restarts[i].pending(),
      queues: this.queues,
      channel: this.channel,
      notify: this.notify,
      sender: this.sender,
      closing: this.closing.signal,
      isClosed: () => this.closed,
      retryPolicy: (retry) => this.retryPolicy(retry),
      failed: (request, attempts, error, nodes) => this.failed(request, attempts, error, nodes),
      granted: (request, lock, attempts, round) => this.granted(request, lock, attempts, round),
      contended: (request, attempt, retryAfter, round) =>
        reportContended(this, request, attempt, retryAfter, round, nodeResults),
      extended: (lock, started, round, ttl) =>
        reportExtended(this, lock, started, round, nodeResults, ttl),
      released: (lock, result, started, round) => this.released(lock, result, started, round),
      lost: (lock, error) => this.lockLost(lock, error as LockLostError),
    };
  }

  /**
   * Opens the connections the engine owns and checks the nodes' set-up
   * (persistence, eviction, replication, duplicates). Warns through the
   * logger, or throws LockConfigurationError when `strict` is on.
   */
  async connect(): Promise<void> {
    const ready = await Promise.all(this.nodes.map((node) => node.connect(2000)));
    await Promise.all(this.restarts.map((watch, i) => ready[i] && watch.check()));
    await checkNodes(this.nodes, ready, this.quorum, this.options);
    this.clockOffset = await nodeClockOffset(this.nodes, ready, this.nodeTimeout(this.options.ttl));
  }

  /**
   * Waits for the lock per the retry policy; throws LockTimeoutError when it
   * stays busy. Callers of this process waiting for the same keys queue up
   * first come first served, and the head tries again as soon as a release
   * is heard, with the retry delay as a fallback.
   */
  acquire(resources: string | readonly string[], options: AcquireOptions = {}): Promise<Lock> {
    return this.begin(resources, options, false);
  }

  /** One attempt: the lock, or LockBusyError (with retryAfter) when someone else holds it. */
  tryAcquire(
    resources: string | readonly string[],
    options: TryAcquireOptions = {},
  ): Promise<Lock> {
    return this.begin(resources, options, true);
  }

  /** An acquisition, one attempt or waiting; bad input rejects (never throws) like the rest. */
  private begin(
    resources: string | readonly string[],
    options: AcquireOptions,
    single: boolean,
  ): Promise<Lock> {
    let request: LockRequest;
    try {
      request = this.request(resources, single ? singleAttempt(options) : options);
    } catch (error) {
      return Promise.reject(error as Error);
    }
    return acquireWith(this.context, request, this.attempts);
  }

  /**
   * Runs `routine` under the lock: acquires (waiting per the retry policy),
   * extends the lease while the routine runs, and always releases. If an
   * extension fails, `lock.signal` aborts before the lease ends. A failed
   * release never hides the routine's own result or error.
   */
  async using<T>(
    resources: string | readonly string[],
    routine: (lock: Lock) => T | Promise<T>,
    options: UsingOptions = {},
  ): Promise<T> {
    checkRoutine(routine);
    const lock = await this.acquire(resources, options);
    return holdWhile(
      lock,
      (ttl, budget) => this.extend(lock, ttl, budget),
      this.options,
      routine,
      options,
    );
  }

  /**
   * Renews the lease on every node where this lock still holds its key,
   * counted only when a quorum succeeds before the current validity ends.
   * Throws LockLostError when the lock is gone (and aborts its signal), or
   * LockUnavailableError when too few nodes answered (the lock stays valid
   * until its current validity ends).
   */
  async extend(lock: Lock, ttl?: number, timeout?: number): Promise<Lock> {
    this.checkOwn(lock);
    return extendLease(this.context, lock, ttl, timeout, (node, leaseTtl) =>
      node.run(EXTEND, lock.keys, [lock.value, leaseTtl]),
    );
  }

  /**
   * Deletes the lock on every node that still holds it; a second call returns
   * the first one's result. Never throws over an expired lock.
   */
  async release(lock: Lock): Promise<ReleaseResult> {
    this.checkOwn(lock);
    return lock.release();
  }

  /** @internal Use {@link release}. */
  releaseOnNodes(lock: Lock): Promise<ReleaseResult> {
    return releaseLease(this.context, lock, (node) =>
      node.run(RELEASE, lock.keys, [lock.value, this.notify, this.sender]),
    );
  }

  private nodeRestarted(restart: NodeRestart): void {
    this.options.logger.warn(restartWarning(restart));
    if (this.listenerCount('nodeRestarted') > 0) this.emit('nodeRestarted', restart);
  }

  /** @internal Called by a lock that was lost. */
  lockLost(lock: Lock, error: LockLostError): void {
    this.held.forget(lock);
    reportLost(this, lock, error);
  }

  /** A grant: held until released or lost (a drain waits for it), and its events. */
  private granted(request: Asking, lock: Lock, attempts: number, round: RoundResult<unknown>) {
    this.held.add(lock);
    reportAcquired(this, request, lock, attempts, round, nodeResults);
  }

  /** A release done on the nodes: warnings for the nodes it missed, the event, the books. */
  private released(
    lock: Lock,
    result: ReleaseResult,
    started: number,
    round: RoundResult<unknown>,
  ): void {
    this.held.forget(lock);
    for (const failure of result.failures) {
      this.warnings.warn(
        failure.node,
        `Release of ${lock.resources.join(', ')} did not reach node ${failure.node}; ` +
          `its copy expires with the lease (${failure.error.message}).`,
      );
    }
    reportReleased(this, lock, result, started, round, nodeResults);
  }

  /**
   * Reports a failed acquisition; subclasses may tag the error (the Nest
   * layer does). `nodes`: how the last attempt's round went, when it got that far.
   */
  protected failed(
    request: {
      readonly resources: readonly string[];
      readonly started?: number;
      readonly waiting?: boolean;
    },
    attempts: number,
    error: LockError,
    nodes?: NodeResults,
  ): LockError {
    reportFailed(this, request, attempts, error, nodes);
    return error;
  }

  /**
   * What every node holds for `resource`: holder value, remaining lease and
   * fence counter per node, and whether a quorum agrees on a holder.
   */
  async inspect(resource: string): Promise<LockInspection> {
    return this.admin.inspect(normalizeResources(resource)[0]);
  }

  /** Resources locked on a quorum of the nodes whose name matches `pattern` (a Redis glob, e.g. `order:*`). */
  list(pattern = '*', limit = 1000): Promise<string[]> {
    return this.admin.list(pattern, limit);
  }

  /**
   * Deletes a lock on every node, whoever holds it, and wakes its waiters:
   * for operators clearing a stuck lock. Its holder is not told; fencing
   * tokens keep its late writes out. Returns how many nodes had the key.
   */
  async forceRelease(resource: string): Promise<number> {
    return this.admin.forceRelease(normalizeResources(resource)[0]);
  }

  /**
   * Raises every fence counter matching `pattern` on every node to the
   * highest value any node has for it. Run it after a node lost its data
   * (with `fenceCounterTtl: 0` this is required before it serves locks
   * again). Returns how many counters were raised, per node.
   */
  reseedFences(pattern = '*'): Promise<Record<string, number>> {
    return this.admin.reseedFences(this.options.fenceCounterTtl, pattern);
  }

  /** Pings every node: up or down, latency, and whether a quorum is reachable. */
  health(): Promise<LockHealth> {
    return this.admin.health();
  }

  /**
   * Shuts the engine down gracefully, then closes the connections it opened
   * (clients passed in stay open). See {@link drain} for the first part;
   * `timeout` (default `shutdownTimeout`) bounds it, and 0 closes at once,
   * releasing the locks still held first.
   */
  close(options: { timeout?: number } = {}): Promise<void> {
    this.closingDown ??= (async () => {
      await this.drain(options.timeout);
      this.closed = true;
      await Promise.all([this.channel?.close(), ...this.nodes.map((node) => node.close())]);
    })();
    return this.closingDown;
  }

  /**
   * The graceful part of shutting down, with the connections left open:
   * new acquisitions fail at once with {@link LockClosingError}, and so do
   * the callers waiting for a lock; the locks in flight (read-write holds and
   * semaphore permits too) keep being extended until their holders release
   * them, for up to `timeout` ms (default `shutdownTimeout`). Locks still
   * held then have their signal aborted (`LockLostError`) and are released
   * on every node. Resolves when no lock of this engine is held.
   */
  async drain(timeout: number = this.options.shutdownTimeout): Promise<void> {
    checkMs('timeout', timeout, 0);
    if (!this.draining) {
      this.draining = true;
      this.closing.abort();
    }
    await this.held.drain(timeout);
  }

  /**
   * @internal For a lock whose lease is set to end by itself (a minimum
   * hold): a shutdown neither waits for it nor releases it early. Its keys
   * expire on the nodes when the lease ends, even if this process has gone.
   */
  leaveToExpire(lock: Lock): void {
    this.held.forget(lock);
  }

  /** A lock's acquisition: the call's options over the engine's, and the keys per node kind. */
  private request(resources: string | readonly string[], options: UsingOptions): LockRequest {
    const list = normalizeResources(resources);
    const keys = list.map((resource) => this.admin.lockKey(resource));
    return callRequest(
      this.context,
      list,
      keys,
      keys.length === 1 ? keys[0] : keys.join('\n'),
      options,
      undefined,
      { acquireKeys: this.nodeCounters ? [...keys, this.admin.nodeCounterKey] : keys },
    );
  }

  /** A call's retry options over the engine's, resolved once per options object. */
  private retryPolicy(retry: RetryOptions): ResolvedRetry {
    let resolved = this.retryPolicies.get(retry);
    if (!resolved) {
      resolved = resolveRetry('retry', retry, this.options.retry);
      if (typeof retry === 'object' && retry !== null) this.retryPolicies.set(retry, resolved);
    }
    return resolved;
  }

  private nodeTimeout(ttl: number): number {
    return Math.min(
      this.options.nodeTimeout ?? Math.max(1, Math.floor(ttl / 10)),
      Math.floor(ttl / 2),
    );
  }

  private checkOwn(lock: Lock): void {
    if (!(lock instanceof Lock)) {
      throw new LockOptionsError('Expected a Lock returned by acquire(), tryAcquire() or using().');
    }
  }
}
