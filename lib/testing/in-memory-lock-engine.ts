import { EventEmitter } from 'node:events';
import {
  checkMs,
  Lock,
  LockAbortedError,
  LockLostError,
  LockOptionsError,
  LockUnavailableError,
  normalizeResources,
  resolveEngineOptions,
  holdWhile,
  reportAcquired,
  reportContended,
  reportExtended,
  reportFailed,
  reportLost,
  reportReleased,
  checkRoutine,
  lostOnNodes,
  singleAttempt,
  type AcquireOptions,
  type TryAcquireOptions,
  type LockEngineOptions,
  type LockError,
  type LockEvents,
  type LockHealth,
  type LockInspection,
  type LockNodeSpec,
  type LockOwner,
  type NodeResults,
  type ReleaseResult,
  type ResolvedEngineOptions,
  type UsingOptions,
} from '../engine/internal.js';
import { markLockFailure } from '../nest/internal.js';
import {
  deleteEverywhere,
  inspectNodes,
  listHeld,
  nodeHealth,
  raiseFences,
} from './memory-admin.js';
import {
  expireLease,
  grantsOf,
  holdElsewhere,
  lockedOnQuorum,
  resetState,
  setNodesDown,
  type ForeignHold,
} from './memory-hooks.js';
import { emptyLine } from './memory-line.js';
import { drift, grantResults, lockKey, nodeSpecs, results, simulateNodes } from './memory-nodes.js';
import {
  acquireInMemory,
  memoryRequest,
  type MemoryAcquirer,
  type MemoryRefusal,
  type MemoryRequest,
} from './memory-acquire.js';
import { MemoryReadWriteLock, MemorySemaphore, type LeaseHost } from './memory-leases.js';
import { attemptLock, extendOnNodes, releaseOnNodes } from './memory-lock-rounds.js';
import type { LockGrant, MemoryState } from './memory-state.js';

/** Node results a refusal already carries. */
const sameResults = (nodes: NodeResults): NodeResults => nodes;

export type { ForeignHold } from './memory-hooks.js';
export type { LockGrant } from './memory-state.js';

/**
 * Options of {@link InMemoryLockEngine}: those of `LockEngine`, with `nodes`
 * optional. A number simulates that many nodes (`memory-1`, `memory-2`, ...);
 * a list of node specs simulates one node per entry, named after it, so a
 * test can reuse the application's configuration. Default: one node.
 */
export type InMemoryLockEngineOptions = Omit<LockEngineOptions, 'nodes'> & {
  nodes?: number | readonly LockNodeSpec[];
};

/**
 * The lock engine's semantics without Redis, for tests: the same methods,
 * options, events and errors as `LockEngine`, over simulated nodes held in
 * memory. Leases, extension and waiting run on `performance.now()` and
 * `setTimeout`, so Jest's fake timers drive them; tokens increase per
 * resource (or per node with `fenceCounter: 'node'`); callers waiting for a
 * resource are served first come, first served.
 *
 * Hooks let a test set up what it means to check: {@link hold} (someone else
 * has the resource), {@link expire} (the lease runs out now),
 * {@link failNodes} (nodes stop answering), and {@link grants} (what was
 * locked, with which token).
 */
export class InMemoryLockEngine extends EventEmitter<LockEvents> implements LockOwner {
  readonly options: ResolvedEngineOptions;
  /** The simulated nodes; `label` names each in errors and reports. */
  readonly nodes: readonly { readonly label: string }[];
  /** floor(n / 2) + 1 */
  readonly quorum: number;
  /** The nodes, the line, the locks and the grants, shared with the files that work on them. */
  private readonly state: MemoryState;
  private readonly owned = new WeakSet<Lock>();

  constructor(options: InMemoryLockEngineOptions = {}) {
    super();
    const { nodes = 1, ...rest } = options ?? {};
    const specs = nodeSpecs(nodes);
    // The real engine's checks and defaults, so options a test passes fail here as they would there.
    this.options = resolveEngineOptions({ ...rest, nodes: specs });
    const memory = simulateNodes(specs, typeof nodes === 'number');
    this.nodes = memory.map(({ label }) => Object.freeze({ label }));
    this.quorum = Math.floor(specs.length / 2) + 1;
    this.state = {
      options: this.options,
      nodes: memory,
      quorum: this.quorum,
      line: emptyLine(),
      locks: new Map(),
      history: [],
      leases: new Map(),
      leaseFences: new Map(),
      closed: false,
    };
  }

  /**
   * Many readers or one writer on `resource`, in memory: the methods of a
   * `ReadWriteLock` (acquire, tryAcquire, using, inspect, forceRelease) with
   * its semantics, so `LockService.readWriteLock()` and `@Locked(key, { mode })`
   * work under the testing module.
   */
  readWriteLock(resource: string): MemoryReadWriteLock {
    return new MemoryReadWriteLock(this.leaseHost, resource);
  }

  /**
   * At most `permits` holders of `name` at once, in memory: the methods of a
   * `Semaphore`, so `LockService.semaphore()` and `@Limited()` work under the
   * testing module.
   */
  semaphore(name: string, permits: number): MemorySemaphore {
    return new MemorySemaphore(this.leaseHost, name, permits);
  }

  /** What the in-memory read-write locks and semaphores share with the engine. */
  private get leaseHost(): LeaseHost {
    return {
      state: this.state,
      failed: (request, attempts, error, nodes) => this.failed(request, attempts, error, nodes),
    };
  }

  // --- The engine's API ------------------------------------------------------

  /** Nothing to open; kept so code that calls it runs unchanged. */
  async connect(): Promise<void> {}

  /** Waits per the retry policy; throws LockTimeoutError when the resource stays busy. */
  async acquire(
    resources: string | readonly string[],
    options: AcquireOptions = {},
  ): Promise<Lock> {
    return acquireInMemory(this.state.line, this.request(resources, options), this.acquirer);
  }

  /** What the shared attempts loop calls: one attempt, and the events of the outcome. */
  private readonly acquirer: MemoryAcquirer<MemoryRequest> = {
    attempt: (request) => this.attempt(request),
    failed: (request, attempts, error, nodes) => this.failed(request, attempts, error, nodes),
    granted: (request, lock, attempts) =>
      reportAcquired(this, request, lock, attempts, this.state, grantResults),
    contended: (request, attempt, refusal) =>
      reportContended(this, request, attempt, refusal.retryAfter, refusal.nodes!, sameResults),
  };

  /** One attempt: the lock, or LockBusyError (with retryAfter) when someone else holds it. */
  async tryAcquire(
    resources: string | readonly string[],
    options: TryAcquireOptions = {},
  ): Promise<Lock> {
    return this.acquire(resources, singleAttempt(options));
  }

  /** Runs `routine` under the lock, extending the lease while it runs; always releases. */
  async using<T>(
    resources: string | readonly string[],
    routine: (lock: Lock) => T | Promise<T>,
    options: UsingOptions = {},
  ): Promise<T> {
    checkRoutine(routine);
    const lock = await this.acquire(resources, options);
    return holdWhile(lock, (ttl) => this.extend(lock, ttl), this.options, routine, options);
  }

  /** Renews the lease on the nodes that still hold it; LockLostError when it is gone. */
  async extend(lock: Lock, ttl?: number, _timeout?: number): Promise<Lock> {
    this.checkOwn(lock);
    if (ttl === undefined) ttl = lock.ttl;
    else if (ttl !== lock.ttl) checkMs('ttl', ttl, 10);
    if (lock.isReleased) throw new LockLostError(lock.resources, 'it was already released');
    const start = performance.now();
    if (lock.validUntil - start <= 0) {
      lock.lost('its lease ran out before the extension');
      throw new LockLostError(lock.resources, 'its lease ran out before the extension');
    }
    const round = extendOnNodes(this.state, lock, start, ttl);
    if (round.yes >= this.quorum) {
      lock.renewed(start + ttl - drift(this.options, ttl));
      // No time passes on the in-memory nodes: the extension took none.
      reportExtended(this, lock, performance.now(), round, results, ttl);
      return lock;
    }
    if (round.no > this.nodes.length - this.quorum) lostOnNodes(lock);
    throw new LockUnavailableError(
      lock.resources,
      round.failures,
      this.quorum,
      this.nodes.length,
      'extend',
    );
  }

  /** Same as `lock.release()`. */
  async release(lock: Lock): Promise<ReleaseResult> {
    this.checkOwn(lock);
    return lock.release();
  }

  /** @internal Use {@link release}. */
  async releaseOnNodes(lock: Lock): Promise<ReleaseResult> {
    const start = performance.now();
    if (lock.validUntil <= start) lock.lost('its lease ran out before it was released');
    lock.released();
    const round = releaseOnNodes(this.state, lock, start);
    if (round.failures.length > 0) {
      this.options.logger.warn(
        `Release of ${lock.resources.join(', ')} did not reach ${round.failures.length} node(s); ` +
          `their copy expires with the lease (${round.failures.map((f) => `${f.node}: ${f.error.message}`).join('; ')}).`,
      );
    }
    const result: ReleaseResult = {
      released: round.yes >= this.quorum,
      nodesReleased: round.yes,
      nodesNotHeld: round.no,
      // Every simulated node answers at once: none is left to hear from.
      nodesPending: 0,
      failures: round.failures,
    };
    reportReleased(this, lock, result, start, round, results);
    return result;
  }

  /** @internal Called by a lock that was lost. */
  lockLost(lock: Lock, error: LockLostError): void {
    reportLost(this, lock, error);
  }

  /** What every simulated node holds for `resource`, as `LockEngine.inspect()` reports it. */
  async inspect(resource: string): Promise<LockInspection> {
    return inspectNodes(this.state, resource);
  }

  /** Locked resources whose name matches `pattern` (a Redis glob), sorted. */
  async list(pattern = '*', limit = 1000): Promise<string[]> {
    return listHeld(this.state, pattern, limit);
  }

  /** Deletes a lock on every node, whoever holds it, and wakes its waiters. Returns how many nodes had it. */
  async forceRelease(resource: string): Promise<number> {
    return deleteEverywhere(this.state, resource);
  }

  /** Raises every fence counter matching `pattern` to the highest value any node has for it. */
  async reseedFences(pattern = '*'): Promise<Record<string, number>> {
    return raiseFences(this.state, pattern);
  }

  /** Every node up unless failed by {@link failNodes}; latency 0. */
  async health(): Promise<LockHealth> {
    return nodeHealth(this.state);
  }

  /** After this, acquisitions fail as they do on a closed `LockEngine`. */
  async close(): Promise<void> {
    this.state.closed = true;
  }

  // --- Hooks for tests ---------------------------------------------------------

  /**
   * Another process takes `resources` now, for `ttl` ms (default: the
   * engine's ttl) unless released before: calls of this engine find them
   * busy, with `retryAfter` from that lease, and wait or fail as they would.
   * The grant gets the next fencing token, as a real holder's would. Throws
   * LockBusyError when the resources are held already.
   */
  hold(resources: string | readonly string[], options: { ttl?: number } = {}): ForeignHold {
    return holdElsewhere(this.state, resources, options);
  }

  /**
   * The lease of `resource` ends now: the nodes drop it and waiters are
   * woken. A lock of this engine that held it is lost at once, as when its
   * lease ran out unextended: its `signal` aborts with a LockLostError, the
   * `lost` event fires, `extend()` throws LockLostError and `release()`
   * reports `released: false`.
   */
  expire(resource: string): void {
    expireLease(this.state, resource);
  }

  /**
   * The nodes at these indexes (all nodes when none is given) stop
   * answering: each command fails, as with a node that is down. With fewer
   * than a quorum answering, calls fail with LockUnavailableError.
   */
  failNodes(...indexes: number[]): void {
    setNodesDown(this.state, indexes, true);
  }

  /** The nodes at these indexes (all when none is given) answer again, with what they held. */
  restoreNodes(...indexes: number[]): void {
    setNodesDown(this.state, indexes, false);
  }

  /** Every grant so far, oldest first: what was locked, when, by whom, with which tokens. */
  grants(resource?: string): readonly LockGrant[] {
    return grantsOf(this.state, resource);
  }

  /** True while a quorum of the nodes holds `resource` for someone (this engine or not). */
  isLocked(resource: string): boolean {
    return lockedOnQuorum(this.state, resource);
  }

  /**
   * Back to a fresh state between tests: no locks, no grants, no fence
   * counters, every node up, and open again. Callers still waiting are left
   * to their own timers.
   */
  reset(): void {
    resetState(this.state);
  }

  // --- How it works --------------------------------------------------------------

  /**
   * Reports a failed acquisition as LockService does: the `waited` and
   * `failed` events, and the error tagged as a lock failure, so that the
   * lock-context interceptor answers it (409, 503) however the engine was
   * provided (the testing module, or `overrideProvider(LockService)`).
   */
  protected failed(
    request: { readonly resources: readonly string[]; started: number; waiting: boolean },
    attempts: number,
    error: LockError,
    nodes?: NodeResults,
  ): LockError {
    reportFailed(this, request, attempts, error, nodes);
    return markLockFailure(error);
  }

  private attempt(request: MemoryRequest): Lock | MemoryRefusal {
    if (this.state.closed)
      throw new LockOptionsError(
        'The lock engine is closed; locks can no longer be taken with it.',
      );
    if (request.signal?.aborted)
      throw new LockAbortedError(request.resources, request.signal.reason);
    const outcome = attemptLock(this.state, this, request);
    if (outcome instanceof Lock) this.owned.add(outcome);
    return outcome;
  }

  private request(resources: string | readonly string[], options: UsingOptions): MemoryRequest {
    const list = normalizeResources(resources);
    const keys = list.map((resource) => lockKey(this.options, resource));
    return memoryRequest(this.options, list, keys, options);
  }

  private checkOwn(lock: Lock): void {
    if (!(lock instanceof Lock) || !this.owned.has(lock)) {
      throw new LockOptionsError('Expected a Lock returned by acquire(), tryAcquire() or using().');
    }
  }
}
