import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import {
  callTimings,
  checkCallOptions,
  checkMs,
  judgeInspection,
  Lock,
  LockAbortedError,
  LockBusyError,
  LockLostError,
  LockOptionsError,
  LockTimeoutError,
  LockUnavailableError,
  normalizeResources,
  resolveEngineOptions,
  resolveRetry,
  renewLease,
  retryDelay,
  SINGLE_ATTEMPT,
  type AcquireOptions,
  type LockEngineOptions,
  type LockError,
  type LockEvents,
  type LockHealth,
  type LockInspection,
  type LockNodeSpec,
  type LockOwner,
  type NodeFailure,
  type NodeLockState,
  type NodeResults,
  type ReleaseResult,
  type ResolvedEngineOptions,
  type ResolvedRetry,
  type UsingOptions,
} from '../engine/internal.js';
import { markLockFailure } from '../nest/internal.js';

/**
 * Options of {@link InMemoryLockEngine}: those of `LockEngine`, with `nodes`
 * optional. A number simulates that many nodes (`memory-1`, `memory-2`, ...);
 * a list of node specs simulates one node per entry, named after it, so a
 * test can reuse the application's configuration. Default: one node.
 */
export type InMemoryLockEngineOptions = Omit<LockEngineOptions, 'nodes'> & {
  nodes?: number | readonly LockNodeSpec[];
};

/** One grant, as {@link InMemoryLockEngine.grants} reports it. */
export interface LockGrant {
  /** The locked resources, in the order asked for. */
  readonly resources: readonly string[];
  /** One fencing token per resource; empty when fencing is off. */
  readonly tokens: readonly number[];
  /** The first resource's token. */
  readonly token: number | undefined;
  /** The lease asked for, in ms. */
  readonly ttl: number;
  /** `'engine'`: taken through this engine; `'elsewhere'`: through {@link InMemoryLockEngine.hold}. */
  readonly by: 'engine' | 'elsewhere';
  /** `performance.now()` at the grant (faked along with the timers under Jest's fake timers). */
  readonly at: number;
}

/** A lock {@link InMemoryLockEngine.hold} put in place for another process. */
export interface ForeignHold {
  readonly resources: readonly string[];
  readonly tokens: readonly number[];
  readonly token: number | undefined;
  /** Frees it as its holder would, waking the callers waiting for it. */
  release(): void;
}

/** A simulated Redis node: lock keys, fence counters, and whether it answers. */
interface MemoryNode {
  readonly label: string;
  readonly keys: Map<string, { value: string; expiresAt: number }>;
  readonly fences: Map<string, number>;
  /** Set while the node is failed by the test: what every command gets. */
  down: Error | undefined;
}

/** A caller waiting for resources, in the simulated line of each of them. */
interface Waiter {
  readonly keys: readonly string[];
  /** When the call began; earlier callers go first. */
  readonly arrival: number;
  readonly seq: number;
  /** Asks the waiter to attempt now. */
  wake: () => void;
}

interface Request {
  readonly resources: readonly string[];
  readonly keys: readonly string[];
  readonly ttl: number;
  readonly drift: number;
  readonly retry: ResolvedRetry;
  readonly waitTimeout: number;
  readonly signal: AbortSignal | undefined;
  readonly started: number;
  waiting: boolean;
  waiter: Waiter | undefined;
}

interface Round {
  readonly yes: number;
  readonly no: number;
  readonly failed: number;
  readonly failures: NodeFailure[];
}

interface Refusal {
  readonly busy: boolean;
  readonly retryAfter: number | undefined;
  /** Free on the nodes, but an earlier waiter stands first: try again as soon as woken. */
  readonly behindLine: boolean;
  readonly error: () => LockUnavailableError;
  readonly nodes: NodeResults;
}

/** The options a single call takes (`autoExtend` only with using()); the real engine's list. */

/** What a failed node answers, in the words ioredis uses for a node that is down. */
const nodeDown = (label: string) =>
  Object.assign(new Error(`connect ECONNREFUSED ${label} (failed by the test)`), {
    code: 'ECONNREFUSED',
  });

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
  private readonly memory: MemoryNode[];
  private readonly locks = new Map<string, Lock>();
  private readonly owned = new WeakSet<Lock>();
  private readonly lines = new Map<string, Waiter[]>();
  private readonly history: LockGrant[] = [];
  private seq = 0;
  private closed = false;

  constructor(options: InMemoryLockEngineOptions = {}) {
    super();
    const { nodes = 1, ...rest } = options ?? {};
    const count = typeof nodes === 'number' ? nodes : nodes.length;
    if (!Number.isInteger(count) || count < 1) {
      throw new LockOptionsError(
        `nodes must be a number of simulated nodes from 1, or a non-empty list of node specs (got ${String(nodes)}).`,
      );
    }
    const specs =
      typeof nodes === 'number'
        ? Array.from({ length: count }, (_, i) => `redis://memory-${i + 1}:6379`)
        : nodes;
    // The real engine's checks and defaults, so options a test passes fail here as they would there.
    this.options = resolveEngineOptions({ ...rest, nodes: specs });
    this.memory = specs.map((spec, i) => ({
      label: typeof nodes === 'number' ? `memory-${i + 1}` : labelOf(spec, i),
      keys: new Map(),
      fences: new Map(),
      down: undefined,
    }));
    this.nodes = this.memory.map(({ label }) => Object.freeze({ label }));
    this.quorum = Math.floor(count / 2) + 1;
  }

  // --- The engine's API ------------------------------------------------------

  /** Nothing to open; kept so code that calls it runs unchanged. */
  async connect(): Promise<void> {}

  /** Waits per the retry policy; throws LockTimeoutError when the resource stays busy. */
  async acquire(
    resources: string | readonly string[],
    options: AcquireOptions = {},
  ): Promise<Lock> {
    const request = this.request(resources, options);
    const deadline = request.started + request.waitTimeout;
    let acquired = false;
    try {
      for (let attempt = 1; ; attempt++) {
        let outcome: Lock | Refusal;
        try {
          outcome = this.attempt(request);
        } catch (error) {
          throw this.failed(request, attempt, error as LockError);
        }
        if (outcome instanceof Lock) {
          acquired = true;
          if (request.waiting) this.emitWaited(request, attempt, true);
          if (this.listenerCount('acquired') > 0) {
            this.emit('acquired', {
              lock: outcome,
              attempts: attempt,
              waited: performance.now() - request.started,
              nodes: { granted: this.up(), denied: 0, failed: this.nodes.length - this.up() },
            });
          }
          return outcome;
        }
        const now = performance.now();
        if (attempt > request.retry.attempts || now >= deadline) {
          if (!outcome.busy) throw this.failed(request, attempt, outcome.error(), outcome.nodes);
          const error =
            attempt === 1
              ? new LockBusyError(request.resources, outcome.retryAfter)
              : new LockTimeoutError(
                  request.resources,
                  outcome.retryAfter,
                  attempt,
                  now - request.started,
                );
          throw this.failed(request, attempt, error, outcome.nodes);
        }
        if (outcome.busy && this.listenerCount('contended') > 0) {
          this.emit('contended', {
            resources: request.resources,
            attempt,
            retryAfter: outcome.retryAfter,
            nodes: outcome.nodes,
          });
        }
        // The real engine's schedule: the retry delay, cut short when the holder's lease ends
        // first; a caller that was first in line but refused asks again as soon as it is woken.
        let delay = retryDelay(request.retry, attempt);
        if (outcome.retryAfter !== undefined) delay = Math.min(delay, outcome.retryAfter + 1);
        if (outcome.busy) {
          this.lineUp(request);
          // Refused only for the line, and first in it now that it stands there: ask at once.
          if (outcome.behindLine && !this.someoneAhead(request)) delay = 0;
        }
        await this.pause(Math.min(delay, deadline - now), request, attempt);
      }
    } finally {
      if (request.waiter) this.leaveLine(request.waiter, acquired);
    }
  }

  /** One attempt: the lock, or LockBusyError (with retryAfter) when someone else holds it. */
  tryAcquire(
    resources: string | readonly string[],
    options: Omit<AcquireOptions, 'retry' | 'waitTimeout'> = {},
  ): Promise<Lock> {
    return this.acquire(resources, { ...options, retry: SINGLE_ATTEMPT });
  }

  /** Runs `routine` under the lock, extending the lease while it runs; always releases. */
  async using<T>(
    resources: string | readonly string[],
    routine: (lock: Lock) => T | Promise<T>,
    options: UsingOptions = {},
  ): Promise<T> {
    const lock = await this.acquire(resources, options);
    if (options.autoExtend !== false) {
      lock.stopExtending = renewLease(
        lock,
        (ttl) => this.extend(lock, ttl),
        this.options.extendThreshold,
        this.options.retry,
      );
    }
    try {
      return await routine(lock);
    } finally {
      const result = await lock.release();
      options.onReleased?.(result);
    }
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
    const round = this.round((node) => {
      if (!lock.keys.every((key) => this.holderOn(node, key, start) === lock.value)) return false;
      for (const key of lock.keys)
        node.keys.set(key, { value: lock.value, expiresAt: start + ttl });
      return true;
    });
    if (round.yes >= this.quorum) {
      lock.renewed(start + ttl - this.drift(ttl));
      if (this.listenerCount('extended') > 0)
        this.emit('extended', { lock, duration: 0, nodes: results(round) });
      return lock;
    }
    if (round.no > this.nodes.length - this.quorum) {
      lock.lost('the nodes no longer hold it (it expired or was taken over)');
      throw new LockLostError(
        lock.resources,
        'the nodes no longer hold it (it expired or was taken over)',
      );
    }
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
    const round = this.round((node) => {
      if (!lock.keys.every((key) => this.holderOn(node, key, start) === lock.value)) return false;
      for (const key of lock.keys) node.keys.delete(key);
      return true;
    });
    for (const key of lock.keys) if (this.locks.get(key) === lock) this.locks.delete(key);
    this.wakeFor(lock.keys);
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
    if (this.listenerCount('released') > 0) {
      this.emit('released', {
        lock,
        result,
        held: performance.now() - lock.grantedAt,
        duration: 0,
        nodes: results(round),
      });
    }
    return result;
  }

  /** @internal Called by a lock that was lost. */
  lockLost(lock: Lock, error: LockLostError): void {
    if (this.listenerCount('lost') > 0)
      this.emit('lost', { lock, error, held: performance.now() - lock.grantedAt });
  }

  /** What every simulated node holds for `resource`, as `LockEngine.inspect()` reports it. */
  async inspect(resource: string): Promise<LockInspection> {
    const key = this.lockKey(normalizeResources(resource)[0]!);
    const now = performance.now();
    const nodes = this.memory.map((node): NodeLockState => {
      if (node.down)
        return {
          node: node.label,
          holder: undefined,
          ttl: undefined,
          fence: undefined,
          error: node.down.message,
        };
      const entry = node.keys.get(key);
      const live = entry && entry.expiresAt > now ? entry : undefined;
      return {
        node: node.label,
        holder: live?.value ?? null,
        ttl: live ? leaseLeft(live.expiresAt, now) : -2,
        fence: this.fenceOn(node, key) ?? null,
      };
    });
    return judgeInspection(normalizeResources(resource)[0]!, nodes, this.quorum);
  }

  /** Locked resources whose name matches `pattern` (a Redis glob), sorted. */
  async list(pattern = '*', limit = 1000): Promise<string[]> {
    const match = globToRegExp(pattern);
    const now = performance.now();
    const seen = new Map<string, number>();
    const answering = this.memory.filter((node) => !node.down);
    for (const node of answering) {
      for (const [key, entry] of node.keys) {
        if (entry.expiresAt <= now) continue;
        const resource = key.slice(this.options.keyPrefix.length + 1, -1);
        if (match.test(resource)) seen.set(resource, (seen.get(resource) ?? 0) + 1);
      }
    }
    // As the real engine counts: a quorum, or as many as a held lock can show with nodes silent.
    const needed = Math.max(1, this.quorum - (this.memory.length - answering.length));
    return [...seen]
      .filter(([, count]) => count >= needed)
      .map(([resource]) => resource)
      .sort()
      .slice(0, limit);
  }

  /** Deletes a lock on every node, whoever holds it, and wakes its waiters. Returns how many nodes had it. */
  async forceRelease(resource: string): Promise<number> {
    const key = this.lockKey(normalizeResources(resource)[0]!);
    const now = performance.now();
    let had = 0;
    for (const node of this.memory) {
      if (node.down) continue;
      if (this.holderOn(node, key, now) !== undefined) had++;
      node.keys.delete(key);
    }
    this.locks.delete(key);
    this.wakeFor([key]);
    return had;
  }

  /** Raises every fence counter matching `pattern` to the highest value any node has for it. */
  async reseedFences(pattern = '*'): Promise<Record<string, number>> {
    const match = globToRegExp(pattern);
    const highest = new Map<string, number>();
    for (const node of this.memory)
      for (const [counter, value] of node.fences) {
        const resource = counter === '' ? '' : counter.slice(this.options.keyPrefix.length + 1, -1);
        if (counter === '' || match.test(resource))
          highest.set(counter, Math.max(highest.get(counter) ?? 0, value));
      }
    const raised: Record<string, number> = {};
    for (const node of this.memory) {
      raised[node.label] = 0;
      if (node.down) continue;
      for (const [counter, value] of highest) {
        if ((node.fences.get(counter) ?? 0) < value) {
          node.fences.set(counter, value);
          raised[node.label]++;
        }
      }
    }
    return raised;
  }

  /** Every node up unless failed by {@link failNodes}; latency 0. */
  async health(): Promise<LockHealth> {
    const nodes = this.memory.map((node) => ({
      node: node.label,
      up: !node.down,
      latency: node.down ? undefined : 0,
      error: node.down?.message,
    }));
    return {
      quorum: nodes.filter((n) => n.up).length >= this.quorum,
      required: this.quorum,
      nodes,
    };
  }

  /** After this, acquisitions fail as they do on a closed `LockEngine`. */
  async close(): Promise<void> {
    this.closed = true;
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
    const list = normalizeResources(resources);
    const ttl = options.ttl === undefined ? this.options.ttl : checkMs('ttl', options.ttl, 1);
    const keys = list.map((resource) => this.lockKey(resource));
    const now = performance.now();
    const busy = keys.filter((key) => this.heldOnQuorum(key, now));
    if (busy.length > 0) {
      throw new LockBusyError(
        list,
        undefined,
        `hold() cannot take ${list.join(', ')}: it is held already; release or expire() it first.`,
      );
    }
    const answering = this.memory.filter((node) => !node.down);
    if (answering.length < this.quorum) {
      const failures = this.round(() => true).failures;
      throw new LockUnavailableError(list, failures, this.quorum, this.nodes.length);
    }
    const value = `elsewhere:${randomValue()}`;
    const tokens = this.grantOnNodes(keys, value, ttl, now, answering);
    this.history.push({ resources: list, tokens, token: tokens[0], ttl, by: 'elsewhere', at: now });
    return {
      resources: list,
      tokens,
      token: tokens[0],
      release: () => {
        for (const node of this.memory)
          for (const key of keys) if (node.keys.get(key)?.value === value) node.keys.delete(key);
        this.wakeFor(keys);
      },
    };
  }

  /**
   * The lease of `resource` ends now: the nodes drop it and waiters are
   * woken. A lock of this engine that held it is lost at once, as when its
   * lease ran out unextended: its `signal` aborts with a LockLostError, the
   * `lost` event fires, `extend()` throws LockLostError and `release()`
   * reports `released: false`.
   */
  expire(resource: string): void {
    const key = this.lockKey(normalizeResources(resource)[0]!);
    for (const node of this.memory) node.keys.delete(key);
    const lock = this.locks.get(key);
    this.locks.delete(key);
    lock?.lost('its lease ran out (ended by the test)');
    this.wakeFor([key]);
  }

  /**
   * The nodes at these indexes (all nodes when none is given) stop
   * answering: each command fails, as with a node that is down. With fewer
   * than a quorum answering, calls fail with LockUnavailableError.
   */
  failNodes(...indexes: number[]): void {
    for (const i of this.indexes(indexes)) this.memory[i]!.down = nodeDown(this.memory[i]!.label);
  }

  /** The nodes at these indexes (all when none is given) answer again, with what they held. */
  restoreNodes(...indexes: number[]): void {
    for (const i of this.indexes(indexes)) this.memory[i]!.down = undefined;
  }

  /** Every grant so far, oldest first: what was locked, when, by whom, with which tokens. */
  grants(resource?: string): readonly LockGrant[] {
    return resource === undefined
      ? [...this.history]
      : this.history.filter((grant) => grant.resources.includes(resource));
  }

  /** True while a quorum of the nodes holds `resource` for someone (this engine or not). */
  isLocked(resource: string): boolean {
    return this.heldOnQuorum(this.lockKey(normalizeResources(resource)[0]!), performance.now());
  }

  /**
   * Back to a fresh state between tests: no locks, no grants, no fence
   * counters, every node up, and open again. Callers still waiting are left
   * to their own timers.
   */
  reset(): void {
    for (const node of this.memory) {
      node.keys.clear();
      node.fences.clear();
      node.down = undefined;
    }
    this.locks.clear();
    this.history.length = 0;
    this.closed = false;
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
    if (request.waiting) this.emitWaited(request, attempts, false);
    if (this.listenerCount('failed') > 0) {
      this.emit('failed', {
        resources: request.resources,
        attempts,
        waited: performance.now() - request.started,
        error,
        nodes,
      });
    }
    return markLockFailure(error);
  }

  private emitWaited(
    request: { readonly resources: readonly string[]; started: number },
    attempts: number,
    acquired: boolean,
  ): void {
    if (this.listenerCount('waited') === 0) return;
    this.emit('waited', {
      resources: request.resources,
      attempts,
      waited: performance.now() - request.started,
      acquired,
    });
  }

  private attempt(request: Request): Lock | Refusal {
    if (this.closed)
      throw new LockOptionsError(
        'The lock engine is closed; locks can no longer be taken with it.',
      );
    if (request.signal?.aborted)
      throw new LockAbortedError(request.resources, request.signal.reason);
    const now = performance.now();
    const value = randomValue();
    // First come, first served: an earlier caller waiting for any of these resources goes first.
    const behindLine = this.someoneAhead(request);
    const leases: number[] = [];
    const granting: MemoryNode[] = [];
    const failures: NodeFailure[] = [];
    for (const node of this.memory) {
      if (node.down) {
        failures.push({ node: node.label, error: node.down });
        continue;
      }
      const held = request.keys
        .map((key) => node.keys.get(key))
        .filter((entry) => entry !== undefined && entry.expiresAt > now);
      if (held.length > 0) leases.push(Math.max(...held.map((e) => leaseLeft(e!.expiresAt, now))));
      else if (behindLine) leases.push(-3);
      else granting.push(node);
    }
    if (granting.length >= this.quorum) {
      const validUntil = now + request.ttl - request.drift;
      const tokens = this.grantOnNodes(request.keys, value, request.ttl, now, granting);
      const lock = new Lock(
        this,
        request.resources,
        request.keys,
        value,
        tokens,
        request.ttl,
        validUntil,
      );
      this.owned.add(lock);
      for (const key of request.keys) this.locks.set(key, lock);
      this.history.push({
        resources: request.resources,
        tokens,
        token: tokens[0],
        ttl: request.ttl,
        by: 'engine',
        at: now,
      });
      return lock;
    }
    const round = {
      yes: granting.length,
      no: leases.length,
      failed: failures.length,
      failures,
    };
    const error = () =>
      new LockUnavailableError(request.resources, failures, this.quorum, this.nodes.length);
    // The real engine's verdict: unavailable when too many nodes failed for a quorum or when
    // nobody denied; otherwise busy, free at the latest when enough holders' leases have ended.
    if (round.failed > this.nodes.length - this.quorum || round.no === 0)
      return { busy: false, retryAfter: undefined, behindLine, error, nodes: results(round) };
    leases.sort((a, b) => a - b);
    const lease = leases[Math.min(Math.max(0, this.quorum - round.yes - 1), leases.length - 1)];
    return {
      busy: true,
      retryAfter: lease !== undefined && lease >= 0 ? lease : undefined,
      behindLine,
      error,
      nodes: results(round),
    };
  }

  /** Writes the lock on `nodes` and returns its tokens: per key, one above every node's counter. */
  private grantOnNodes(
    keys: readonly string[],
    value: string,
    ttl: number,
    now: number,
    nodes: readonly MemoryNode[],
  ): number[] {
    for (const node of nodes)
      for (const key of keys) node.keys.set(key, { value, expiresAt: now + ttl });
    if (!this.options.fencing) return [];
    const perNode = this.options.fenceCounter === 'node';
    return keys.map((key) => {
      const counter = perNode ? '' : key;
      let token = 0;
      for (const node of nodes) token = Math.max(token, (node.fences.get(counter) ?? 0) + 1);
      // The real engine's write-back: every granting node carries the token it settled on.
      for (const node of nodes) node.fences.set(counter, token);
      return token;
    });
  }

  private fenceOn(node: MemoryNode, key: string): number | undefined {
    const own = node.fences.get(key);
    const shared = node.fences.get('');
    if (own === undefined) return shared;
    return shared === undefined ? own : Math.max(own, shared);
  }

  private holderOn(node: MemoryNode, key: string, now: number): string | undefined {
    const entry = node.keys.get(key);
    return entry && entry.expiresAt > now ? entry.value : undefined;
  }

  private heldOnQuorum(key: string, now: number): boolean {
    let held = 0;
    for (const node of this.memory) if (this.holderOn(node, key, now) !== undefined) held++;
    return held >= this.quorum;
  }

  /** A round over the nodes: `apply` says whether a node that answers agreed. */
  private round(apply: (node: MemoryNode) => boolean): Round {
    let yes = 0;
    let no = 0;
    const failures: NodeFailure[] = [];
    for (const node of this.memory) {
      if (node.down) failures.push({ node: node.label, error: node.down });
      else if (apply(node)) yes++;
      else no++;
    }
    return { yes, no, failed: failures.length, failures };
  }

  private up(): number {
    return this.memory.filter((node) => !node.down).length;
  }

  private someoneAhead(request: Request): boolean {
    for (const key of request.keys) {
      const line = this.lines.get(key);
      if (!line) continue;
      for (const waiter of line) {
        if (waiter === request.waiter) continue;
        if (
          !request.waiter ||
          waiter.arrival < request.waiter.arrival ||
          (waiter.arrival === request.waiter.arrival && waiter.seq < request.waiter.seq)
        )
          return true;
      }
    }
    return false;
  }

  /** Puts a refused caller in the line of each of its resources, by when its call began. */
  private lineUp(request: Request): void {
    request.waiting = true;
    if (request.waiter) return;
    const waiter: Waiter = {
      keys: request.keys,
      arrival: request.started,
      seq: this.seq++,
      wake: () => undefined,
    };
    request.waiter = waiter;
    for (const key of request.keys) {
      const line = this.lines.get(key) ?? [];
      line.push(waiter);
      line.sort((a, b) => a.arrival - b.arrival || a.seq - b.seq);
      this.lines.set(key, line);
    }
  }

  private leaveLine(waiter: Waiter, acquired: boolean): void {
    for (const key of waiter.keys) {
      const line = this.lines.get(key);
      if (!line) continue;
      const rest = line.filter((w) => w !== waiter);
      if (rest.length > 0) this.lines.set(key, rest);
      else this.lines.delete(key);
    }
    // Given up: whoever stood behind may go now.
    if (!acquired) this.wakeFor(waiter.keys);
  }

  /** Wakes the first waiter in the line of each key, which asks again at once. */
  private wakeFor(keys: readonly string[]): void {
    for (const key of keys) this.lines.get(key)?.[0]?.wake();
  }

  /** Waits `ms`, or less when woken by a release in front of it; aborts with the caller's signal. */
  private pause(ms: number, request: Request, attempts: number): Promise<void> {
    request.waiting = true;
    return new Promise<void>((resolve, reject) => {
      const { signal } = request;
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', aborted);
        if (request.waiter) request.waiter.wake = () => undefined;
      };
      const aborted = () => {
        done();
        reject(
          this.failed(request, attempts, new LockAbortedError(request.resources, signal?.reason)),
        );
      };
      const timer = setTimeout(
        () => {
          done();
          resolve();
        },
        Math.max(0, ms),
      );
      if (request.waiter)
        request.waiter.wake = () => {
          done();
          resolve();
        };
      if (signal?.aborted) return aborted();
      signal?.addEventListener('abort', aborted, { once: true });
    });
  }

  private request(resources: string | readonly string[], options: UsingOptions): Request {
    checkCallOptions(options);
    const timings = callTimings(options, this.options, (retry) =>
      resolveRetry('retry', retry, this.options.retry),
    );
    const list = normalizeResources(resources);
    return {
      resources: list,
      keys: list.map((resource) => this.lockKey(resource)),
      ttl: timings.ttl,
      drift: this.drift(timings.ttl),
      retry: timings.retry,
      waitTimeout: timings.waitTimeout,
      signal: options.signal,
      started: performance.now(),
      waiting: false,
      waiter: undefined,
    };
  }

  private lockKey(resource: string): string {
    return `${this.options.keyPrefix}{${resource}}`;
  }

  private drift(ttl: number): number {
    return Math.floor(ttl * this.options.driftFactor) + 2;
  }

  private checkOwn(lock: Lock): void {
    if (!(lock instanceof Lock) || !this.owned.has(lock)) {
      throw new LockOptionsError('Expected a Lock returned by acquire(), tryAcquire() or using().');
    }
  }

  private indexes(indexes: readonly number[]): number[] {
    if (indexes.length === 0) return this.memory.map((_, i) => i);
    for (const i of indexes) {
      if (!Number.isInteger(i) || i < 0 || i >= this.memory.length) {
        throw new LockOptionsError(
          `There is no node ${i}: the engine simulates ${this.memory.length} (indexes 0 to ${this.memory.length - 1}).`,
        );
      }
    }
    return [...indexes];
  }
}

const results = (round: Round): NodeResults => ({
  granted: round.yes,
  denied: round.no,
  failed: round.failed,
});

/** Whole milliseconds left, as PTTL rounds them. */
const leaseLeft = (expiresAt: number, now: number) => Math.max(0, Math.ceil(expiresAt - now));

function randomValue(): string {
  return randomBytes(16).toString('base64url');
}

/** A node's name from its spec, as the real engine's labels read: `host:port`. */
function labelOf(spec: LockNodeSpec, index: number): string {
  if (typeof spec === 'string') {
    try {
      const url = new URL(spec);
      return `${url.hostname}:${url.port || 6379}`;
    } catch {
      return `node-${index + 1}`;
    }
  }
  return `node-${index + 1}`;
}

/** A Redis glob (`*`, `?`, `[...]`, `\` escapes) as a regular expression. */
function globToRegExp(pattern: string): RegExp {
  let source = '';
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]!;
    if (c === '\\' && i + 1 < pattern.length) source += escapeRegExp(pattern[++i]!);
    else if (c === '*') source += '.*';
    else if (c === '?') source += '.';
    else if (c === '[') {
      const end = pattern.indexOf(']', i + 1);
      if (end < 0) source += '\\[';
      else {
        const body = pattern.slice(i + 1, end);
        source += `[${body.startsWith('^') ? `^${body.slice(1)}` : body}]`;
        i = end;
      }
    } else source += escapeRegExp(c);
  }
  return new RegExp(`^${source}$`, 's');
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&');
}
