import { LockLostError, type NodeFailure } from './lock-errors.js';

/** What a release found on the nodes. Releasing never throws over an expired lock. */
export interface ReleaseResult {
  /** True when a quorum of nodes still held this lock and deleted it. */
  readonly released: boolean;
  /** Nodes that held this lock and deleted it. */
  readonly nodesReleased: number;
  /** Nodes where the lock had already expired or another holder had it. */
  readonly nodesNotHeld: number;
  /**
   * Nodes whose answer was not awaited: a release resolves as soon as its
   * outcome is decided (a quorum released). Not a miss: the release was sent
   * to them too, and runs there on the same connection a moment later.
   */
  readonly nodesPending: number;
  /** Nodes that did not answer; their copy expires with the lease. */
  readonly failures: readonly NodeFailure[];
}

/** The operations a {@link Lock} delegates to the engine that granted it. */
export interface LockOwner {
  extend(lock: Lock, ttl?: number): Promise<Lock>;
  // Internal, like the engines' implementations of them: stripped from the published types
  // together, so that `implements LockOwner` still holds there.
  /** @internal Runs the release on the nodes; {@link Lock.release} makes sure it runs once. */
  releaseOnNodes(lock: Lock): Promise<ReleaseResult>;
  /** @internal Told once when the lock is lost. */
  lockLost(lock: Lock, error: LockLostError): void;
}

/**
 * What a read-write hold or a semaphore permit is made of, as its primitive
 * (the Redis one or the in-memory one) granted it.
 */
export interface LeaseGrant {
  readonly resources: readonly string[];
  readonly keys: readonly string[];
  readonly value: string;
  readonly tokens: readonly number[];
  readonly ttl: number;
  readonly validUntil: number;
}

/** A grant's parts in the order of Lock's constructor. */
export const grantParts = (grant: LeaseGrant) =>
  [grant.resources, grant.keys, grant.value, grant.tokens, grant.ttl, grant.validUntil] as const;

type LockState = 'held' | 'released' | 'lost';

/** Why a lock whose validity ended without an extension is lost. */
const LEASE_RAN_OUT = 'its lease ran out before it was extended';

/**
 * A granted lock. Valid until `expiresAt` unless extended; its `signal`
 * aborts (with a {@link LockLostError}) when the lock is lost.
 *
 * @example
 * await using lock = await locks.acquire('order:42');
 * await db.update(order, { fence: lock.token });
 */
export class Lock implements AsyncDisposable {
  private state: LockState = 'held';
  private controller: AbortController | undefined;
  /** Why the lock was lost: the reason of a signal first read after that. */
  private lostError: LockLostError | undefined;
  /** Set once the lease's end is watched (see watchExpiry): each renewal moves the timer. */
  private expiryTimer: NodeJS.Timeout | undefined;
  private releasing: Promise<ReleaseResult> | undefined;
  /** @internal Monotonic (performance.now) time of the grant. */
  readonly grantedAt = performance.now();
  private validity: number;
  /** @internal Stops automatic extension, when it runs. */
  stopExtending: (() => void) | undefined;

  /** @internal Created by the engine only. */
  constructor(
    private readonly owner: LockOwner,
    /** The locked resources, as given. */
    readonly resources: readonly string[],
    /** @internal The nodes' lock keys, one per resource. */
    readonly keys: readonly string[],
    /** The random value that identifies this grant on the nodes. */
    readonly value: string,
    /**
     * One fencing token per resource (same order), strictly greater than any
     * token granted before on that resource. Empty when fencing is off.
     */
    readonly tokens: readonly number[],
    /**
     * The lease in ms the lock was granted with: what an extension without a
     * ttl of its own renews (one with its own ttl does not change it).
     */
    readonly ttl: number,
    validUntil: number,
  ) {
    this.validity = validUntil;
  }

  /** End of validity on the monotonic clock (`performance.now()` time); moves with each extension. */
  get validUntil(): number {
    return this.validity;
  }

  /** The fencing token of the first resource; `undefined` when fencing is off. */
  get token(): number | undefined {
    return this.tokens[0];
  }

  /** Milliseconds of guaranteed validity left; 0 once expired, released or lost. */
  get remainingTime(): number {
    return this.state === 'held' ? Math.max(0, this.validUntil - performance.now()) : 0;
  }

  /** Wall-clock time (whole epoch ms, rounded down) at which the validity ends, unless extended. */
  get expiresAt(): number {
    return Math.floor(Date.now() + (this.validUntil - performance.now()));
  }

  /** True while the lock is neither released, nor lost, nor past its validity. */
  get isHeld(): boolean {
    return this.remainingTime > 0;
  }

  /**
   * True once {@link release} was called (by the holder, or by a shutdown's
   * drain), also for a lock that had been lost before.
   */
  get isReleased(): boolean {
    return this.releasing !== undefined || this.state === 'released';
  }

  /**
   * Aborts when the lock is lost: its lease ran out without an extension, or
   * an extension found another holder. `signal.reason` is a LockLostError.
   * Not aborted by a normal release.
   */
  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.lostError) this.controller.abort(this.lostError);
      else this.watchExpiry();
    }
    return this.controller.signal;
  }

  /** Renews the lease (default: this lock's ttl). Throws LockLostError if it is gone. */
  extend(ttl?: number): Promise<Lock> {
    return this.owner.extend(this, ttl);
  }

  /** Deletes the lock on every node; safe to call more than once. */
  release(): Promise<ReleaseResult> {
    this.releasing ??= this.owner.releaseOnNodes(this);
    return this.releasing;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }

  /** @internal Called by the engine when an extension moved the validity. */
  renewed(validUntil: number): void {
    this.validity = validUntil;
    if (this.expiryTimer !== undefined && this.state === 'held') this.armExpiry();
  }

  /**
   * @internal Reports the lock lost (its signal, if read, aborts; the engine's
   * `lost` event) once its validity runs out without an extension, even when
   * this process was paused past it. Armed by reading {@link signal}, and by
   * automatic extension, whose holder may never read the signal.
   */
  watchExpiry(): void {
    if (this.state !== 'held' || this.expiryTimer !== undefined) return;
    // Already over (a signal first read after the lease ended): lost now, not a timer later.
    if (this.validUntil <= performance.now()) this.lost(LEASE_RAN_OUT);
    else this.armExpiry();
  }

  /** @internal Marks the lock lost and aborts its signal with the reason. */
  lost(reason: string): void {
    if (this.state !== 'held') return;
    this.state = 'lost';
    this.halt();
    const error = new LockLostError(this.resources, reason);
    this.lostError = error;
    this.controller?.abort(error);
    this.owner.lockLost(this, error);
  }

  /** @internal Marks the lock released (before the nodes answer). */
  released(): void {
    if (this.state === 'held') this.state = 'released';
    this.halt();
  }

  private halt(): void {
    clearTimeout(this.expiryTimer);
    this.stopExtending?.();
    this.stopExtending = undefined;
  }

  private armExpiry(): void {
    clearTimeout(this.expiryTimer);
    this.expiryTimer = setTimeout(
      () => this.lost(LEASE_RAN_OUT),
      Math.max(0, this.validUntil - performance.now()),
    );
    this.expiryTimer.unref();
  }
}
