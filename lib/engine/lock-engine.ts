import { randomFillSync } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { Lock, type LockOwner, type ReleaseResult } from './lock.js';
import type { LockEvents, NodeResults } from './lock-events.js';
import {
  LockAbortedError,
  LockBusyError,
  LockClosingError,
  LockConfigurationError,
  type LockError,
  LockLostError,
  LockOptionsError,
  LockTimeoutError,
  LockUnavailableError,
} from './lock-errors.js';
import { LockAdmin, type LockHealth, type LockInspection } from './lock-admin.js';
import { LockNode } from './lock-node.js';
import {
  checkMs,
  resolveEngineOptions,
  resolveRetry,
  type AcquireOptions,
  type LockEngineOptions,
  type ResolvedEngineOptions,
  type ResolvedRetry,
  type RetryOptions,
  type UsingOptions,
} from './lock-options.js';
import { ACQUIRE, EXTEND, FENCE_WRITEBACK, RELEASE } from './lua-scripts.js';
import { checkNodes } from './node-checks.js';
import { nodeClockOffset } from './node-clock.js';
import { RestartWatch, type NodeRestart } from './node-restarts.js';
import { quorumRound, roundFailures, type RoundResult } from './quorum-round.js';
import { ReleaseChannel } from './release-channel.js';
import { lineLease, retryDelay } from './retry-delay.js';
import { WaitQueues, type Ticket } from './wait-queue.js';
import { WarningLimiter } from './warning-limiter.js';

/**
 * Fence counters created with a TTL start at the wall clock in ms times this:
 * above any token of an earlier counter for the resource as long as it saw
 * fewer than 1,024 grants per ms of its life, and below 2^53 until 2248.
 */
const FENCE_SEED_SCALE = 1024;

const SINGLE_ATTEMPT: RetryOptions = Object.freeze({ attempts: 0 });

/** The options a single call takes (`autoExtend` and `onReleased` only with using()), each named once. */
const CALL_OPTIONS: ReadonlySet<string> = new Set(
  Object.keys({
    ttl: true,
    waitTimeout: true,
    unavailableTimeout: true,
    retry: true,
    signal: true,
    autoExtend: true,
    onReleased: true,
  } satisfies Record<keyof UsingOptions, true>),
);

/** Longest resource name accepted; longer ones are almost always a key built from the wrong value. */
export const MAX_RESOURCE_LENGTH = 512;

type AcquireReply = [granted: 0 | 1, ...rest: number[]];

interface Request {
  readonly resources: readonly string[];
  readonly keys: readonly string[];
  /** Names the key set in this process's wait queues. */
  readonly queueId: string;
  /** Lock keys followed by the node's fence counter (ACQUIRE on a node that counts for all resources). */
  readonly acquireKeys: readonly string[];
  readonly ttl: number;
  readonly nodeTimeout: number;
  readonly drift: number;
  readonly retry: ResolvedRetry;
  readonly waitTimeout: number;
  readonly unavailableTimeout: number;
  readonly signal: AbortSignal | undefined;
  /** The caller's signal joined with the engine's shutdown, made once the acquisition waits. */
  waitSignal?: AbortSignal;
  /** performance.now() when the acquisition began. */
  readonly started: number;
  /** Set once the acquisition waits (lines up or sleeps before another attempt), for the `waited` event. */
  waiting: boolean;
  /** Epoch ms when the acquisition began: its place in the nodes' waiters' lines. */
  readonly arrival: number;
  /** How long a refused attempt keeps its place in the nodes' lines; 0 when it will not retry. */
  readonly lineLease: number;
  /** Names this acquisition in the nodes' lines: the value of its first attempt. */
  waiter: string;
  /** Set once a refused attempt joined the nodes' lines (and must leave them). */
  inLine: boolean;
}

/** Why an attempt did not produce a lock. */
interface Refusal {
  readonly busy: boolean;
  /** When busy: ms until enough nodes are free at the latest. */
  readonly retryAfter: number | undefined;
  /**
   * When busy: this attempt put the acquisition in the nodes' lines, and every
   * node that refused did so only because an earlier waiter stood first in
   * its line (the lock itself was free there).
   */
  joinedBehind?: boolean;
  readonly error: () => LockUnavailableError;
  readonly round: RoundResult<AcquireReply>;
}

/** An attempt that produced a lock, with the round that granted it (for the events). */
interface Grant {
  readonly lock: Lock;
  readonly round: RoundResult<AcquireReply>;
}

/** The counts of a round, as the events report them. */
const nodeResults = (round: RoundResult<unknown>): NodeResults => ({
  granted: round.yes,
  denied: round.no,
  failed: round.failed,
});

const isGranted = (reply: AcquireReply) => reply[0] === 1;

/** A grant by a node whose grants do not count now (see RestartWatch) fails that node's part. */
function uncounted(reply: AcquireReply, why: string): AcquireReply {
  if (isGranted(reply)) throw new Error(`granted, but not counted toward the quorum: ${why}`);
  return reply;
}
/**
 * A fenced grant carries a token per resource. One found again after a resend
 * reads its counter back, and a counter deleted or evicted meanwhile gives
 * none: that node's grant then cannot vouch for a token, and does not count.
 */
function withTokens(reply: AcquireReply, count: number): AcquireReply {
  if (!isGranted(reply)) return reply;
  for (let r = 1; r <= count; r++) {
    if (typeof reply[r] !== 'number') {
      throw new Error(
        'granted, but without a fencing token (its fence counter was deleted or evicted); not counted toward the quorum',
      );
    }
  }
  return reply;
}
const isOne = (reply: unknown) => reply === 1;
const isPositive = (reply: unknown) => typeof reply === 'number' && reply > 0;

/** 128-bit random values, drawn from a pooled buffer to keep crypto calls off the hot path. */
const randomPool = Buffer.allocUnsafe(16 * 256);
let randomOffset = randomPool.length;
function randomValue(): string {
  if (randomOffset === randomPool.length) {
    randomFillSync(randomPool);
    randomOffset = 0;
  }
  randomOffset += 16;
  return randomPool.toString('base64url', randomOffset - 16, randomOffset);
}

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
  private closed = false;
  /** Set by close() or drain(): no new locks, waiters stop waiting. */
  private draining = false;
  /** Aborted when draining begins: wakes every waiter. */
  private readonly closing = new AbortController();
  /** Locks granted by this engine and not yet released or lost, for a graceful shutdown. */
  private readonly held = new Set<Lock>();
  /** Resolves a drain() waiting for the last held lock. */
  private onDrained: (() => void) | undefined;
  private closingDown: Promise<void> | undefined;
  /** Warnings about the same node within a short time, folded into one. */
  private readonly warnings = new WarningLimiter((message) => this.options.logger.warn(message));
  private readonly queues = new WaitQueues();
  private readonly retryPolicies = new WeakMap<RetryOptions, ResolvedRetry>();
  /** Hears releases from other processes; undefined when notifications are off. */
  private readonly channel: ReleaseChannel | undefined;
  private readonly admin: LockAdmin;
  /** The release script's notify argument. */
  private readonly notify: '1' | '0';
  /** Names this engine in its release messages, so that it skips its own (see RELEASE). */
  private readonly sender = randomValue().slice(0, 12);
  /** Fencing with one counter per node for all resources (`fenceCounter: 'node'`), where a node can. */
  private readonly nodeCounters: boolean;
  /** The nodes' clock minus this process's (see nodeClockOffset), for waiters' arrivals. */
  private clockOffset = 0;
  /** Per node: whether its grants count toward a quorum after a restart. */
  private readonly restarts: readonly RestartWatch[];
  /** The longest lease this engine has asked for (ms): what a restarted node may have forgotten. */
  private longestTtl: number;

  constructor(options: LockEngineOptions) {
    super();
    this.options = resolveEngineOptions(options);
    this.nodes = this.options.nodes.map((spec, i) => {
      try {
        return LockNode.from(spec);
      } catch (error) {
        // ioredis refuses some specs the checks above cannot foresee; never echo credentials.
        throw new LockOptionsError(
          `nodes[${i}] cannot be used: ${hideCredentials((error as Error).message)}. Check its URL or options.`,
        );
      }
    });
    this.quorum = Math.floor(this.nodes.length / 2) + 1;
    this.longestTtl = this.options.ttl;
    this.restarts = this.nodes.map(
      (node) =>
        new RestartWatch(
          node,
          () => this.longestTtl,
          (restart) => this.nodeRestarted(restart),
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
      );
    }
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
  async acquire(
    resources: string | readonly string[],
    options: AcquireOptions = {},
  ): Promise<Lock> {
    const request = this.request(resources, options);
    const { started } = request;
    const deadline = started + request.waitTimeout;
    let ticket: Ticket | undefined;
    let acquired = false;
    let granting: RoundResult<AcquireReply> | undefined;
    /** When the attempts in a row that found too few nodes began. */
    let unavailableSince: number | undefined;
    try {
      if (request.retry.attempts > 0 && this.queues.has(request.queueId)) {
        // Others of this process already wait for these keys: line up behind them. Promoted
        // after the one ahead got the lock, wait for its release (this process's own, which
        // wakes the head at once), with the first retry delay as the fallback: asking at once
        // would only be refused, and a short hold's release would race that refusal.
        ticket = await this.lineUp(request);
        await this.waitTurn(ticket, retryDelay(request.retry, 1), deadline, request, 0);
      }
      for (let attempt = 1; ; attempt++) {
        ticket?.attempting();
        let outcome: Grant | Refusal;
        try {
          outcome = await this.attempt(request);
        } catch (error) {
          throw this.failed(request, attempt, error as LockError);
        }
        if (ticket) ticket.waiter = request.waiter;
        if ('lock' in outcome) {
          const { lock, round } = outcome;
          granting = round;
          if (this.draining) {
            // Granted while the engine began to shut down: nothing may start under it now.
            await lock.release();
            throw this.failed(request, attempt, new LockClosingError(request.resources));
          }
          acquired = true;
          this.held.add(lock);
          if (request.waiting) this.emitWaited(request, attempt, true);
          if (this.listenerCount('acquired') > 0) {
            this.emit('acquired', {
              lock,
              attempts: attempt,
              waited: performance.now() - started,
              nodes: nodeResults(round),
            });
          }
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
          throw this.failed(request, attempt, outcome.error(), nodeResults(outcome.round));
        if (attempt > request.retry.attempts || now >= deadline) {
          const nodes = nodeResults(outcome.round);
          if (!outcome.busy) throw this.failed(request, attempt, outcome.error(), nodes);
          const error =
            attempt === 1
              ? new LockBusyError(request.resources, outcome.retryAfter)
              : new LockTimeoutError(request.resources, outcome.retryAfter, attempt, now - started);
          throw this.failed(request, attempt, error, nodes);
        }
        if (outcome.busy && this.listenerCount('contended') > 0) {
          this.emit('contended', {
            resources: request.resources,
            attempt,
            retryAfter: outcome.retryAfter,
            nodes: nodeResults(outcome.round),
          });
        }
        let delay = retryDelay(request.retry, attempt);
        // A holder that crashed frees the lock when its lease ends; no need to sleep past that.
        if (outcome.retryAfter !== undefined) delay = Math.min(delay, outcome.retryAfter + 1);
        // Free, but an earlier waiter was first in line: this attempt just took its place there
        // too, by arrival, so it may now be first itself (one whose own first attempts failed,
        // say). The head asks again at once instead of after a delay nothing will cut short.
        if (outcome.joinedBehind) delay = 0;
        if (!outcome.busy) {
          await this.pause(Math.min(delay, deadline - now, outage), request, attempt);
        } else if (!ticket) {
          ticket = await this.lineUp(request);
          // A release may have come before the subscription was in place: the head asks again now.
          if (!ticket.isHead) await this.waitTurn(ticket, delay, deadline, request, attempt);
        } else {
          await this.waitTurn(ticket, delay, deadline, request, attempt);
        }
      }
    } finally {
      if (ticket) {
        ticket.leave(acquired);
        this.channel?.unsubscribe(request.keys);
      }
      if (request.inLine) this.leaveLines(request, granting);
    }
  }

  /**
   * Takes a waiter out of the nodes' lines it joined when refused: a grant
   * did so on the granting nodes; elsewhere, and after giving up, its place
   * would otherwise hold the line until its lease ran out. Best effort.
   */
  private leaveLines(request: Request, granting: RoundResult<AcquireReply> | undefined): void {
    this.nodes.forEach((node, i) => {
      if (granting?.replies[i]?.[0] === 1) return;
      for (const key of request.keys)
        node.client.hdel(`${key}:q`, request.waiter).catch(() => undefined);
    });
  }

  /** Joins this process's queue for the keys and listens for their releases. */
  private async lineUp(request: Request): Promise<Ticket> {
    request.waiting = true;
    const ticket = this.queues.join(request.queueId, request.keys, request.arrival);
    ticket.waiter = request.waiter;
    await this.channel?.subscribe(request.keys, request.nodeTimeout);
    return ticket;
  }

  private async waitTurn(
    ticket: Ticket,
    delay: number,
    deadline: number,
    request: Request,
    attempts: number,
  ): Promise<void> {
    try {
      await ticket.wait(delay, deadline, this.waitSignal(request));
    } catch {
      throw this.failed(request, attempts, this.stoppedWaiting(request));
    }
  }

  /** The signal a wait listens to: the caller's, and the engine's shutdown. */
  private waitSignal(request: Request): AbortSignal {
    request.waitSignal ??= request.signal
      ? AbortSignal.any([request.signal, this.closing.signal])
      : this.closing.signal;
    return request.waitSignal;
  }

  /** Why a wait ended early: the engine shuts down, or the caller aborted. */
  private stoppedWaiting(request: Request): LockError {
    return this.draining
      ? new LockClosingError(request.resources)
      : new LockAbortedError(request.resources, request.signal?.reason);
  }

  /** One attempt: the lock, or LockBusyError (with retryAfter) when someone else holds it. */
  tryAcquire(
    resources: string | readonly string[],
    options: Omit<AcquireOptions, 'retry' | 'waitTimeout'> = {},
  ): Promise<Lock> {
    return this.acquire(resources, { ...options, retry: SINGLE_ATTEMPT });
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
    const lock = await this.acquire(resources, options);
    if (options.autoExtend !== false) this.keepExtended(lock);
    try {
      return await routine(lock);
    } finally {
      const result = await lock.release();
      options.onReleased?.(result);
    }
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
    if (ttl === undefined) ttl = lock.ttl;
    else if (ttl !== lock.ttl) checkMs('ttl', ttl, 10);
    if (ttl > this.longestTtl) this.longestTtl = ttl;
    if (lock.isReleased) throw new LockLostError(lock.resources, 'it was already released');
    const start = performance.now();
    const left = lock.validUntil - start;
    if (left <= 0) {
      lock.lost('its lease ran out before the extension');
      throw new LockLostError(lock.resources, 'its lease ran out before the extension');
    }
    const round = await quorumRound(
      this.nodes,
      (node) => node.run(EXTEND, lock.keys, [lock.value, ttl]),
      isOne,
      this.quorum,
      Math.min(timeout ?? this.nodeTimeout(ttl), left),
    );
    if (round.yes >= this.quorum && performance.now() < lock.validUntil) {
      lock.renewed(start + ttl - this.drift(ttl));
      if (this.listenerCount('extended') > 0)
        this.emit('extended', {
          lock,
          duration: performance.now() - start,
          nodes: nodeResults(round),
        });
      return lock;
    }
    // The new lease may have been set on nodes whose answer came too late or never: a shorter
    // one than before then ends sooner than the validity the lock still counts on.
    const unknownOutcome = start + ttl - this.drift(ttl);
    if (unknownOutcome < lock.validUntil) lock.renewed(unknownOutcome);
    if (round.no > this.nodes.length - this.quorum) {
      lock.lost('the nodes no longer hold it (it expired or was taken over)');
      throw new LockLostError(
        lock.resources,
        'the nodes no longer hold it (it expired or was taken over)',
      );
    }
    throw new LockUnavailableError(
      lock.resources,
      roundFailures(this.nodes, round.errors),
      this.quorum,
      this.nodes.length,
      'extend',
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
  async releaseOnNodes(lock: Lock): Promise<ReleaseResult> {
    // A holder that was paused past its lease learns here that it lost the lock.
    const start = performance.now();
    if (lock.validUntil <= start) lock.lost('its lease ran out before it was released');
    lock.released();
    const releasing = quorumRound(
      this.nodes,
      (node) => node.run(RELEASE, lock.keys, [lock.value, this.notify, this.sender]),
      isPositive,
      this.quorum,
      this.nodeTimeout(lock.ttl),
    );
    // This process's own waiters need no message from the nodes (the channel skips this
    // engine's own), nor the release's answers: their attempt goes out on the same connections
    // after the release, so each node runs it after the release (a round trip sooner than
    // waiting for the answers).
    for (const key of lock.keys) this.queues.released(key);
    const round = await releasing;
    // Only now: a close() waiting for this lock must not close the connections under its release.
    this.forget(lock);
    const failures = roundFailures(this.nodes, round.errors);
    for (const failure of failures) {
      this.warnings.warn(
        failure.node,
        `Release of ${lock.resources.join(', ')} did not reach node ${failure.node}; ` +
          `its copy expires with the lease (${failure.error.message}).`,
      );
    }
    const result: ReleaseResult = {
      released: round.yes >= this.quorum,
      nodesReleased: round.yes,
      nodesNotHeld: round.no,
      nodesPending: this.nodes.length - round.yes - round.no - round.failed,
      failures,
    };
    if (this.listenerCount('released') > 0) {
      const now = performance.now();
      this.emit('released', {
        lock,
        result,
        held: now - lock.grantedAt,
        duration: now - start,
        nodes: nodeResults(round),
      });
    }
    return result;
  }

  private nodeRestarted(restart: NodeRestart): void {
    this.options.logger.warn(
      restart.persistent
        ? `Node ${restart.node} restarted (run id ${restart.runId}); it keeps its data (appendonly, appendfsync always), so its grants count at once.`
        : `Node ${restart.node} restarted${restart.runId === undefined ? ' or could not be checked (INFO failed)' : ''} without proof that it kept its data ` +
            `(appendonly yes with appendfsync always): its grants do not count toward a quorum for ${restart.excludedFor} ms, the longest lease it may have forgotten.`,
    );
    if (this.listenerCount('nodeRestarted') > 0) this.emit('nodeRestarted', restart);
  }

  /** @internal Called by a lock that was lost. */
  lockLost(lock: Lock, error: LockLostError): void {
    this.forget(lock);
    if (this.listenerCount('lost') > 0)
      this.emit('lost', { lock, error, held: performance.now() - lock.grantedAt });
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
    if (request.waiting) this.emitWaited(request, attempts, false);
    if (this.listenerCount('failed') > 0) {
      this.emit('failed', {
        resources: request.resources,
        attempts,
        waited: request.started === undefined ? 0 : performance.now() - request.started,
        error,
        nodes,
      });
    }
    return error;
  }

  private emitWaited(
    request: { readonly resources: readonly string[]; readonly started?: number },
    attempts: number,
    acquired: boolean,
  ): void {
    if (this.listenerCount('waited') === 0) return;
    this.emit('waited', {
      resources: request.resources,
      attempts,
      waited: request.started === undefined ? 0 : performance.now() - request.started,
      acquired,
    });
  }

  /**
   * What every node holds for `resource`: holder value, remaining lease and
   * fence counter per node, and whether a quorum agrees on a holder.
   */
  async inspect(resource: string): Promise<LockInspection> {
    return this.admin.inspect(normalizeResources(resource)[0]);
  }

  /** Resources locked on any node whose name matches `pattern` (a Redis glob, e.g. `order:*`). */
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
   * the callers waiting for a lock; the locks in flight keep being extended
   * until their holders release them, for up to `timeout` ms (default
   * `shutdownTimeout`). Locks still held then have their signal aborted
   * (`LockLostError`) and are released on every node. Resolves when no lock
   * of this engine is held.
   */
  async drain(timeout: number = this.options.shutdownTimeout): Promise<void> {
    checkMs('timeout', timeout, 0);
    if (!this.draining) {
      this.draining = true;
      this.closing.abort();
    }
    if (this.held.size > 0 && timeout > 0) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, timeout);
        const previous = this.onDrained;
        this.onDrained = () => {
          clearTimeout(timer);
          previous?.();
          resolve();
        };
      });
    }
    const left = [...this.held];
    for (const lock of left) {
      lock.lost(
        `the lock engine shut down before its holder released it (shutdownTimeout ${timeout} ms)`,
      );
    }
    await Promise.all(left.map((lock) => lock.release()));
  }

  /**
   * @internal For a lock whose lease is set to end by itself (a minimum
   * hold): a shutdown neither waits for it nor releases it early. Its keys
   * expire on the nodes when the lease ends, even if this process has gone.
   */
  leaveToExpire(lock: Lock): void {
    this.forget(lock);
  }

  /** A lock of this engine is no longer held: the last one lets a drain() finish. */
  private forget(lock: Lock): void {
    if (!this.held.delete(lock) || this.held.size > 0) return;
    const drained = this.onDrained;
    this.onDrained = undefined;
    drained?.();
  }

  /** Keeps the lease renewed until the lock is released or lost. */
  private keepExtended(lock: Lock): void {
    const { ttl } = lock;
    // The last extension must end, and the signal abort, before the lease does.
    const margin = Math.max(2, Math.ceil(ttl * 0.02));
    let timer: NodeJS.Timeout | undefined;
    let stopped = false;
    const schedule = (delay: number) => {
      timer = setTimeout(tick, Math.max(0, delay));
      timer.unref();
    };
    const tick = async () => {
      const budget = lock.validUntil - margin - performance.now();
      if (budget <= 0) return lock.lost('it could not be extended before its lease ran out');
      try {
        await this.extend(lock, ttl, budget);
        if (!stopped)
          schedule(lock.validUntil - performance.now() - ttl * this.options.extendThreshold);
      } catch (error) {
        if (stopped || error instanceof LockLostError) return;
        const left = lock.validUntil - margin - performance.now();
        if (left <= 0) {
          lock.lost(
            `it could not be extended before its lease ran out (${(error as Error).message})`,
          );
        } else {
          schedule(Math.min(left / 4, retryDelay(this.options.retry, 1)));
        }
      }
    };
    lock.stopExtending = () => {
      stopped = true;
      clearTimeout(timer);
    };
    schedule(lock.validUntil - performance.now() - ttl * this.options.extendThreshold);
  }

  private async attempt(request: Request): Promise<Grant | Refusal> {
    if (this.closed)
      throw new LockOptionsError(
        'The lock engine is closed; locks can no longer be taken with it.',
      );
    if (this.draining) throw new LockClosingError(request.resources);
    if (request.signal?.aborted)
      throw new LockAbortedError(request.resources, request.signal.reason);
    const { ttl, keys } = request;
    const value = randomValue();
    const start = performance.now();
    const validUntil = start + ttl - request.drift;
    const { fencing, fenceCounterTtl } = this.options;
    // A fence counter created now starts above every token issued before it (see lua-scripts.ts).
    const seed = fencing && fenceCounterTtl > 0 ? Date.now() * FENCE_SEED_SCALE : 0;
    if (request.waiter === '') request.waiter = value;
    // A first attempt that is not yet waiting does not join the waiters' line (fewer arguments on
    // the uncontended path): if refused, the caller lines up and asks again at once, joining then.
    const args: (string | number)[] = [
      value,
      ttl,
      keys.length,
      fencing ? '1' : '0',
      seed,
      fenceCounterTtl,
    ];
    const joinsLine = request.waiting || request.waiter !== value;
    if (joinsLine) args.push(request.waiter, request.arrival, request.lineLease);
    // A node that counts the tokens of all resources gets its counter after the lock keys.
    const round = await quorumRound(
      this.nodes,
      (node, i) => {
        const send = () => {
          const sent = (
            this.countsForAll(node)
              ? node.run(ACQUIRE, request.acquireKeys, args)
              : node.run(ACQUIRE, keys, args)
          ) as Promise<AcquireReply>;
          const excluded = this.restarts[i].excluded();
          if (excluded !== undefined) return sent.then((reply) => uncounted(reply, excluded));
          return fencing ? sent.then((reply) => withTokens(reply, keys.length)) : sent;
        };
        // Just reconnected: whether the node restarted is being read (one INFO round trip).
        const checking = this.restarts[i].pending();
        return checking ? checking.then(send) : send();
      },
      isGranted,
      this.quorum,
      request.nodeTimeout,
    );
    if (round.yes >= this.quorum) {
      let tokens: number[] | undefined;
      try {
        const settled = fencing ? this.settleTokens(round, request, value, validUntil) : [];
        // A promise only when a second fencing round had to run: no await on the usual path.
        tokens = settled instanceof Promise ? await settled : settled;
      } catch (error) {
        this.cleanUp(keys, value);
        throw error;
      }
      if (tokens && performance.now() < validUntil) {
        return {
          lock: new Lock(this, request.resources, keys, value, tokens, ttl, validUntil),
          round,
        };
      }
    }
    this.cleanUp(keys, value);
    const refusal = this.refusal(round, request);
    if (refusal.busy && request.lineLease > 0 && joinsLine) {
      if (!request.inLine)
        refusal.joinedBehind = round.replies.every((reply) => reply?.[0] !== 0 || reply[1] === -3);
      request.inLine = true;
    }
    return refusal;
  }

  /**
   * The fencing tokens of a grant: per resource the highest counter among the
   * granting nodes. Final at once when they agree; otherwise written back to
   * the nodes that returned less, only where our lock still stands, and final
   * only if a quorum then carries them. Undefined when that fails.
   */
  private settleTokens(
    round: RoundResult<AcquireReply>,
    request: Request,
    value: string,
    validUntil: number,
  ): number[] | undefined | Promise<number[] | undefined> {
    const count = request.keys.length;
    const tokens = new Array<number>(count).fill(0);
    for (const reply of round.replies) {
      if (reply?.[0] !== 1) continue;
      for (let r = 0; r < count; r++) tokens[r] = Math.max(tokens[r], reply[r + 1]);
    }
    const overflow = tokens.findIndex((token) => !Number.isSafeInteger(token));
    if (overflow >= 0) {
      throw new LockConfigurationError(
        `The fence counter of '${request.resources[overflow]}' passed 2^53 - 1, beyond what a JavaScript number ` +
          `holds exactly. Delete ${request.keys[overflow]}:fence and ${this.admin.nodeCounterKey} on every node (with ` +
          'fenceCounterTtl set, a new counter starts from the clock), or lock under another keyPrefix.',
      );
    }
    const behind: LockNode[] = [];
    let carried = 0;
    round.replies.forEach((reply, i) => {
      if (reply?.[0] !== 1) return;
      if (tokens.every((token, r) => reply[r + 1] === token)) carried++;
      else behind.push(this.nodes[i]);
    });
    if (behind.length === 0) return tokens;
    const needed = this.quorum - carried;
    const left = validUntil - performance.now();
    if (left <= 0 || behind.length < needed) return undefined;
    return this.writeBack(behind, needed, tokens, request, value, left);
  }

  /** The second fencing round: `tokens` are final once `needed` of the nodes `behind` carry them. */
  private async writeBack(
    behind: readonly LockNode[],
    needed: number,
    tokens: number[],
    request: Request,
    value: string,
    left: number,
  ): Promise<number[] | undefined> {
    const writeback = await quorumRound(
      behind,
      (node) => {
        // KEYS: the lock keys, then each one's counter (the node's own, or the resource's).
        const all = this.countsForAll(node);
        const counters = request.keys.map((key) =>
          all ? this.admin.nodeCounterKey : `${key}:fence`,
        );
        return node.run(
          FENCE_WRITEBACK,
          [...request.keys, ...counters],
          [value, all ? 0 : this.options.fenceCounterTtl, ...tokens],
        );
      },
      isOne,
      needed,
      Math.min(request.nodeTimeout, left),
    );
    return writeback.yes >= needed ? tokens : undefined;
  }

  /**
   * True where the node counts fencing tokens with one counter for all
   * resources (`fenceCounter: 'node'`; a cluster cannot, see ACQUIRE).
   */
  private countsForAll(node: LockNode): boolean {
    return this.nodeCounters && node.keepsNodeCounter;
  }

  /** Why an attempt failed: busy (enough nodes answered, someone holds it) or unavailable. */
  private refusal(round: RoundResult<AcquireReply>, request: Request): Refusal {
    const error = () =>
      new LockUnavailableError(
        request.resources,
        round.yes >= this.quorum
          ? [
              {
                node: 'quorum',
                error: new Error(
                  'granted, but the grant or its fencing round ended too late to leave any validity (nodes too slow)',
                ),
              },
            ]
          : roundFailures(this.nodes, round.errors),
        this.quorum,
        this.nodes.length,
      );
    // Unavailable when too many nodes failed for a quorum even if every other one granted, or
    // when nobody denied (a late grant). Otherwise a holder stood in the way: busy, even if the
    // round stopped before the nodes still pending could deny too.
    if (round.failed > this.nodes.length - this.quorum || round.no === 0)
      return { busy: false, retryAfter: undefined, error, round };
    // The lock can be had once `quorum` nodes are free: those that granted us now, plus the
    // denying nodes in the order their holder's lease runs out (the last known one when the
    // round stopped early).
    const leases: number[] = [];
    for (const reply of round.replies) if (reply?.[0] === 0) leases.push(reply[1]);
    leases.sort((a, b) => a - b);
    const lease = leases[Math.min(Math.max(0, this.quorum - round.yes - 1), leases.length - 1)];
    return {
      busy: true,
      retryAfter: lease !== undefined && lease >= 0 ? lease : undefined,
      error,
      round,
    };
  }

  /** Best-effort release of a failed attempt on every node, including those that did not answer. */
  private cleanUp(keys: readonly string[], value: string): void {
    for (const node of this.nodes)
      node.run(RELEASE, keys, [value, this.notify, this.sender]).catch(() => undefined);
  }

  private async pause(ms: number, request: Request, attempts: number): Promise<void> {
    request.waiting = true;
    try {
      await sleep(ms, undefined, { signal: this.waitSignal(request) });
    } catch {
      throw this.failed(request, attempts, this.stoppedWaiting(request));
    }
  }

  private request(resources: string | readonly string[], options: UsingOptions): Request {
    if (options === null || typeof options !== 'object') {
      throw new LockOptionsError(
        `Lock options must be an object such as { ttl: 5000 } (got ${String(options)}).`,
      );
    }
    for (const key in options) {
      if (!CALL_OPTIONS.has(key)) {
        throw new LockOptionsError(
          `There is no lock option '${key}'; a call takes ${[...CALL_OPTIONS].join(', ')}.`,
        );
      }
    }
    if (options.onReleased !== undefined && typeof options.onReleased !== 'function') {
      throw new LockOptionsError(
        `onReleased must be a function that takes the release result (got ${typeof options.onReleased}).`,
      );
    }
    if (options.autoExtend !== undefined && typeof options.autoExtend !== 'boolean') {
      throw new LockOptionsError(
        `autoExtend must be true or false (got ${typeof options.autoExtend}).`,
      );
    }
    const list = normalizeResources(resources);
    const defaults = this.options;
    const ttl = options.ttl === undefined ? defaults.ttl : checkMs('ttl', options.ttl, 10);
    if (ttl > this.longestTtl) this.longestTtl = ttl;
    const keys = list.map((resource) => this.admin.lockKey(resource));
    const retry = options.retry === undefined ? defaults.retry : this.retryPolicy(options.retry);
    const nodeTimeout = this.nodeTimeout(ttl);
    if (options.signal !== undefined && !(options.signal instanceof AbortSignal)) {
      throw new LockOptionsError('signal must be an AbortSignal (from an AbortController).');
    }
    return {
      resources: list,
      keys,
      queueId: keys.length === 1 ? keys[0] : keys.join('\n'),
      acquireKeys: this.nodeCounters ? [...keys, this.admin.nodeCounterKey] : keys,
      ttl,
      nodeTimeout,
      drift: this.drift(ttl),
      retry,
      waitTimeout:
        options.waitTimeout === undefined
          ? defaults.waitTimeout
          : checkMs('waitTimeout', options.waitTimeout, 0),
      unavailableTimeout:
        options.unavailableTimeout === undefined
          ? defaults.unavailableTimeout
          : checkMs('unavailableTimeout', options.unavailableTimeout, 0),
      signal: options.signal,
      started: performance.now(),
      waiting: false,
      // On the nodes' clock (comparable between processes whatever their own clocks say), finer
      // than a millisecond.
      arrival: performance.timeOrigin + performance.now() + this.clockOffset,
      lineLease: retry.attempts > 0 ? lineLease(retry) : 0,
      waiter: '',
      inLine: false,
    };
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

  private drift(ttl: number): number {
    return Math.floor(ttl * this.options.driftFactor) + 2;
  }

  private checkOwn(lock: Lock): void {
    if (!(lock instanceof Lock)) {
      throw new LockOptionsError('Expected a Lock returned by acquire(), tryAcquire() or using().');
    }
  }
}

/** Masks the user and password of any URL in `text`. */
export function hideCredentials(text: string): string {
  return text.replace(/([a-z][\w+.-]*:\/\/)[^@/\s]*@/gi, '$1***@');
}

/**
 * Why `resource` cannot be a resource name, or undefined when it can: a
 * string of 1 to MAX_RESOURCE_LENGTH characters, well-formed Unicode (a lone
 * surrogate would collapse into U+FFFD and share a key with others), not
 * starting with `}` (its hash tag would be empty on a Redis Cluster).
 */
export function resourceProblem(resource: unknown): string | undefined {
  if (typeof resource !== 'string') return `it is ${resource === null ? 'null' : typeof resource}`;
  if (resource.length === 0 || resource.length > MAX_RESOURCE_LENGTH) {
    return `it has ${resource.length} characters, not 1 to ${MAX_RESOURCE_LENGTH}`;
  }
  if (resource.charCodeAt(0) === 0x7d) {
    return "it starts with '}', which would end the key's Redis Cluster hash tag early; put another character first";
  }
  if (LONE_SURROGATE.test(resource)) return 'it is not well-formed Unicode (a lone surrogate)';
  return undefined;
}

const LONE_SURROGATE = /\p{Cs}/u;

/** One resource or several, each a valid resource name; duplicates dropped. */
export function normalizeResources(resources: string | readonly string[]): readonly string[] {
  const list = typeof resources === 'string' ? [resources] : resources;
  if (!Array.isArray(list) || list.length === 0) {
    throw new LockOptionsError(
      `Name the resource(s) to lock as a string or a non-empty array of strings, e.g. 'order:42' (got ${Array.isArray(list) ? 'an empty array' : typeof resources}).`,
    );
  }
  for (const resource of list) {
    const problem = resourceProblem(resource);
    if (problem) throw new LockOptionsError(`That resource name cannot be used: ${problem}.`);
  }
  return list.length === 1 ? list : [...new Set(list)];
}
