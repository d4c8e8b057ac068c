import { setTimeout as sleep } from 'node:timers/promises';
import { keepAlive } from './lease-renewal.js';
import type { Lock } from './lock.js';
import { normalizeResources, type LockEngine } from './lock-engine.js';
import {
  LockBusyError,
  LockConfigurationError,
  LockError,
  LockOptionsError,
} from './lock-errors.js';
import { type RetryOptions } from './lock-options.js';
import { checkMs, MAX_TIMER_MS, rejectUnknownKeys, resolveRetry } from './option-checks.js';
import { lineLease } from './retry-delay.js';

/** Why a term ended: its lease was lost, the leader stepped down, or the election was closed. */
export type RetirementReason = 'lost' | 'stepped-down' | 'closed';

/** One instance's leadership, from its election to its retirement. */
export interface LeaderTerm {
  /** The election's name: the resource its lock is taken on. */
  readonly name: string;
  /**
   * The term's fencing token: above the epoch of every earlier term of this
   * election. Give it to fenced writes, so that the work of a leader that
   * was paused past its lease is refused once a newer leader has written.
   */
  readonly epoch: number;
  /** Aborts when the term ends; its reason is a {@link LeadershipEndedError}. */
  readonly signal: AbortSignal;
  /** Wall-clock time (epoch ms) of the election. */
  readonly electedAt: number;
}

export interface LeaderElectionOptions {
  /**
   * The leader's lease in ms, renewed while it leads. When the leader dies,
   * another instance takes over within this plus a round trip. Default: the
   * engine's ttl.
   */
  ttl?: number;
  /** How contenders poll while someone else leads. Default: the engine's retry policy. */
  retry?: RetryOptions;
  /**
   * Called when this instance becomes the leader. Not awaited: start the
   * leader's work here and stop it when `term.signal` aborts. An error it
   * throws is logged; the term goes on.
   */
  onElected?: (term: LeaderTerm) => unknown;
  /**
   * Called when a term of this instance ended, after its signal aborted
   * and (unless it was lost) after its lock was released. Awaited before
   * this instance contends again.
   */
  onRetired?: (term: LeaderTerm, reason: RetirementReason) => unknown;
}

/** Each option of a leader election named once: a misspelt callback must not go unnoticed. */
const ELECTION_KEYS: ReadonlySet<string> = new Set(
  Object.keys({
    ttl: true,
    retry: true,
    onElected: true,
    onRetired: true,
  } satisfies Record<keyof LeaderElectionOptions, true>),
);

/** The reason a term's signal carries. */
export class LeadershipEndedError extends LockError {
  override readonly code = 'LEADERSHIP_ENDED';

  constructor(
    /** The election's name. */
    readonly election: string,
    readonly epoch: number,
    readonly reason: RetirementReason,
    cause?: unknown,
  ) {
    super(
      `Leadership of '${election}' (epoch ${epoch}) ended: ` +
        (reason === 'lost'
          ? 'its lease was lost (not renewed in time, or taken over). Stop the work done as leader; fenced writes with this epoch are refused once a newer leader writes.'
          : reason === 'stepped-down'
            ? 'this instance stepped down.'
            : 'the election was closed.'),
      cause === undefined ? undefined : { cause },
    );
  }
}

/** Longest pause between tries while too few nodes answer (ms). */
const OUTAGE_PAUSE_CAP = 1000;

interface Current {
  readonly lock: Lock;
  readonly term: LeaderTerm;
  /** Ends the term, with the reason. */
  readonly end: (reason: RetirementReason) => void;
  /** Settles once the term's lock is released and onRetired returned. */
  readonly retired: Promise<void>;
}

/**
 * One instance's part in electing a leader among the instances that run an
 * election of the same name: it contends for a lock (lining up behind the
 * current holder), keeps the lease renewed while it leads, and contends
 * again once the lease is lost. Built only on the engine's public API.
 *
 * @example
 * const election = new LeaderElection(engine, 'billing-worker', {
 *   onElected: (term) => runBilling({ epoch: term.epoch, signal: term.signal }),
 * });
 * // on shutdown: another instance takes over at once
 * await election.close();
 */
export class LeaderElection {
  readonly name: string;
  private readonly ttl: number;
  private readonly retry: RetryOptions | undefined;
  /** How long an instance that stepped down sits out before it contends again (ms). */
  private readonly handOver: number;
  private readonly onElected: LeaderElectionOptions['onElected'];
  private readonly onRetired: LeaderElectionOptions['onRetired'];
  /** Aborted by close(): stops a pending acquisition and the loop. */
  private readonly stopping = new AbortController();
  private current: Current | undefined;
  private electedWaiters: {
    resolve: (term: LeaderTerm) => void;
    reject: (error: unknown) => void;
  }[] = [];
  /** Settles once this instance stopped contending: closed, or the engine shut down. */
  readonly finished: Promise<void>;

  constructor(
    readonly engine: LockEngine,
    name: string,
    options: LeaderElectionOptions = {},
  ) {
    if (typeof name !== 'string') {
      throw new LockOptionsError(
        `A leader election is named by one string, e.g. 'billing-worker' (got ${typeof name}).`,
      );
    }
    [this.name] = normalizeResources(name);
    if (options === null || typeof options !== 'object') {
      throw new LockOptionsError(
        `Leader election options must be an object such as { ttl: 5000, onElected } (got ${String(options)}).`,
      );
    }
    rejectUnknownKeys(
      `Leader election '${name}'`,
      options as Record<string, unknown>,
      ELECTION_KEYS,
    );
    if (!engine.options.fencing) {
      throw new LockOptionsError(
        `Leader election '${name}' needs fencing tokens for its epochs, but the engine was created with ` +
          'fencing: false. Remove that option (fencing is on by default).',
      );
    }
    this.ttl = options.ttl === undefined ? engine.options.ttl : checkMs('ttl', options.ttl, 10);
    this.retry = options.retry;
    // A live contender asks again at least once within the time the nodes keep its place in
    // the waiters' line, even if no release reached it (one that was still between its first
    // attempts, say): sitting out that long hands the lock to it rather than winning it back.
    this.handOver = lineLease(resolveRetry('retry', options.retry, engine.options.retry));
    for (const key of ['onElected', 'onRetired'] as const) {
      if (options[key] !== undefined && typeof options[key] !== 'function') {
        throw new LockOptionsError(
          `${key} of leader election '${name}' must be a function (got ${typeof options[key]}).`,
        );
      }
    }
    this.onElected = options.onElected;
    this.onRetired = options.onRetired;
    this.finished = this.contend();
  }

  /** True while this instance leads: its term's lease is still valid. */
  get isLeader(): boolean {
    return this.current?.lock.isHeld === true;
  }

  /** The current term's epoch (fencing token) while this instance leads. */
  get epoch(): number | undefined {
    return this.isLeader ? this.current?.term.epoch : undefined;
  }

  /** The current term while this instance leads. */
  get term(): LeaderTerm | undefined {
    return this.isLeader ? this.current?.term : undefined;
  }

  /** True once close() was called, or the engine shut down. */
  get closed(): boolean {
    return this.stopping.signal.aborted;
  }

  /**
   * Resolves with the term once this instance leads (at once if it does);
   * rejects with a {@link LeadershipEndedError} if the election is closed
   * first.
   */
  whenElected(): Promise<LeaderTerm> {
    const term = this.term;
    if (term) return Promise.resolve(term);
    if (this.closed) return Promise.reject(this.closedError());
    return new Promise((resolve, reject) => this.electedWaiters.push({ resolve, reject }));
  }

  /**
   * Ends the current term: aborts its signal, releases the lock (so a
   * waiting instance takes over within a round trip) and calls onRetired.
   * This instance then sits out for as long as the nodes keep a waiter's
   * place in line (850 ms with the default retry policy), so that any other
   * instance that contends takes over even if it was between two attempts,
   * and then contends again, behind the instances waiting. Resolves when
   * the term is over; a no-op when not leading.
   */
  async stepDown(): Promise<void> {
    const current = this.current;
    if (!current) return;
    current.end('stepped-down');
    await current.retired;
  }

  /** Steps down if leading, and stops contending. Resolves when both are done. */
  async close(): Promise<void> {
    this.stopping.abort();
    this.current?.end('closed');
    await this.finished;
  }

  private closedError(): LeadershipEndedError {
    return new LeadershipEndedError(this.name, 0, 'closed');
  }

  private async contend(): Promise<void> {
    let outages = 0;
    try {
      while (!this.closed) {
        let lock: Lock;
        try {
          lock = await this.engine.acquire(this.name, {
            ttl: this.ttl,
            ...(this.retry === undefined ? {} : { retry: this.retry }),
            // Followers wait as long as the leader lives; the engine caps a wait at a timer's range.
            waitTimeout: MAX_TIMER_MS,
            signal: this.stopping.signal,
          });
        } catch (error) {
          if (this.closed) return;
          // A wait that ran its whole course (about 24 days): contend again.
          if (error instanceof LockBusyError) continue;
          if (this.cannotContend(error)) {
            this.stopping.abort();
            return;
          }
          // Too few nodes answered: keep trying, less often while the outage lasts.
          outages++;
          const pause = Math.min(this.ttl, OUTAGE_PAUSE_CAP, 25 * 2 ** Math.min(outages, 10));
          await sleep(pause, undefined, { signal: this.stopping.signal }).catch(() => undefined);
          continue;
        }
        outages = 0;
        if ((await this.lead(lock)) === 'stepped-down') {
          await sleep(this.handOver, undefined, { signal: this.stopping.signal }).catch(
            () => undefined,
          );
        }
      }
    } finally {
      const waiters = this.electedWaiters;
      this.electedWaiters = [];
      for (const waiter of waiters) waiter.reject(this.closedError());
    }
  }

  /**
   * Errors after which contending again cannot help: the engine is closed or
   * shutting down, or needs an operator. Logged, except a shutdown.
   */
  private cannotContend(error: unknown): boolean {
    // The engine's shutdown is told by its code (LOCK_CLOSING), so that this file does not
    // depend on the engine version that introduced it.
    if ((error as LockError | undefined)?.code === 'LOCK_CLOSING') return true;
    if (error instanceof LockOptionsError || error instanceof LockConfigurationError) {
      this.engine.options.logger.error(
        `Leader election '${this.name}' stopped contending: ${(error as Error).message}`,
      );
      return true;
    }
    return false;
  }

  /** Holds one term, from the grant until it ends; then retires it. Resolves with why it ended. */
  private async lead(lock: Lock): Promise<RetirementReason> {
    const controller = new AbortController();
    const term: LeaderTerm = Object.freeze({
      name: this.name,
      epoch: lock.token ?? 0,
      signal: controller.signal,
      electedAt: Date.now(),
    });
    const stopRenewing = keepAlive(this.engine, lock);
    let end!: (reason: RetirementReason) => void;
    const ended = new Promise<RetirementReason>((resolve) => (end = resolve));
    const onLost = () => end('lost');
    lock.signal.addEventListener('abort', onLost, { once: true });
    let retired!: () => void;
    const current: Current = {
      lock,
      term,
      end,
      retired: new Promise<void>((resolve) => (retired = resolve)),
    };
    this.current = current;
    // close() may have come while the lock was being granted.
    if (this.closed) end('closed');

    const waiters = this.electedWaiters;
    this.electedWaiters = [];
    for (const waiter of waiters) waiter.resolve(term);
    this.call('onElected', () => this.onElected?.(term));

    const reason = await ended;
    // Not leading from here on: isLeader is false before anyone hears of the end.
    this.current = undefined;
    stopRenewing();
    lock.signal.removeEventListener('abort', onLost);
    // The work stops before the lock is released, so it cannot overlap the next leader's
    // beyond what the fence refuses.
    controller.abort(
      new LeadershipEndedError(
        this.name,
        term.epoch,
        reason,
        reason === 'lost' ? lock.signal.reason : undefined,
      ),
    );
    if (reason !== 'lost') {
      try {
        await lock.release();
      } catch (error) {
        // Left to expire with its lease; the next leader waits that long at most.
        this.engine.options.logger.warn(
          `Leader election '${this.name}' could not release its lock: ${(error as Error).message}`,
        );
      }
    }
    await this.call('onRetired', () => this.onRetired?.(term, reason));
    retired();
    return reason;
  }

  /** Runs a callback; what it throws (or rejects with) is logged, never thrown into the loop. */
  private call(name: string, callback: () => unknown): Promise<void> {
    const report = (error: unknown) =>
      this.engine.options.logger.error(
        `Leader election '${this.name}': ${name} failed: ${error instanceof Error ? error.message : String(error)}`,
      );
    try {
      return Promise.resolve(callback()).then(() => undefined, report);
    } catch (error) {
      report(error);
      return Promise.resolve();
    }
  }
}
