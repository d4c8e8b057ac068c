/**
 * What the in-memory engine's read-write locks and semaphores share (see
 * memory-leases.ts): the attempts loop on the simulated line, the holders'
 * leases and tokens, extension, release, force-release and what each node
 * would answer to an inspection.
 */
import {
  holdWhile,
  Lock,
  checkRoutine,
  LockAbortedError,
  LockLostError,
  LockOptionsError,
  LockUnavailableError,
  normalizeResources,
  type AcquireOptions,
  type LeaseGrant,
  type LockError,
  type LockOwner,
  type NodeResults,
  type ReleaseResult,
  type UsingOptions,
} from '../engine/internal.js';
import { leaveLine, someoneAhead, wakeFor } from './memory-line.js';
import {
  acquireInMemory,
  memoryRequest,
  type MemoryRefusal,
  type MemoryRequest,
} from './memory-acquire.js';
import { drift, lockKey, nodeRound, randomValue, up } from './memory-nodes.js';
import type { MemoryHolding, MemoryState } from './memory-state.js';

/** What a primitive needs of its engine: the state, and how a failed call is reported. */
export interface LeaseHost {
  readonly state: MemoryState;
  failed(
    request: { readonly resources: readonly string[]; started: number; waiting: boolean },
    attempts: number,
    error: LockError,
    nodes?: NodeResults,
  ): LockError;
}

interface LeaseRequest extends MemoryRequest {
  readonly kind: string;
}

export abstract class MemoryLeasePrimitive implements LockOwner {
  /** The key its holders and its line are kept under, apart from the plain lock's. */
  protected readonly key: string;
  private readonly owned = new WeakSet<Lock>();

  /** @internal Made by the in-memory engine's readWriteLock() and semaphore(). */
  constructor(
    protected readonly host: LeaseHost,
    readonly name: string,
    suffix: string,
  ) {
    [this.name] = normalizeResources(name);
    this.key = `${lockKey(host.state.options, this.name)}:${suffix}`;
  }

  /** Whether a caller asking for `kind` may join the live holders now. */
  protected abstract admits(kind: string, live: readonly MemoryHolding[]): boolean;
  /** The holders in the way of `kind`, whose leases say when to ask again. */
  protected abstract blocking(kind: string, live: readonly MemoryHolding[]): MemoryHolding[];
  /** The grant's token (a write or a permit counts one; a read takes the last write's). */
  protected abstract token(kind: string): number;
  /** The holding and its handle. */
  protected abstract grant(
    kind: string,
    grant: LeaseGrant,
    token: number,
    live: readonly MemoryHolding[],
  ): Lock;

  protected get state(): MemoryState {
    return this.host.state;
  }

  /** The live holdings, the expired ones dropped. */
  protected live(now = performance.now()): MemoryHolding[] {
    const all = this.state.leases.get(this.key) ?? [];
    const live = all.filter((holding) => holding.expiresAt > now);
    if (live.length !== all.length) {
      if (live.length > 0) this.state.leases.set(this.key, live);
      else this.state.leases.delete(this.key);
    }
    return live;
  }

  protected nextToken(): number {
    const token = (this.state.leaseFences.get(this.key) ?? 0) + 1;
    this.state.leaseFences.set(this.key, token);
    return token;
  }

  protected lastToken(): number {
    return this.state.leaseFences.get(this.key) ?? 0;
  }

  /** Keeps the holding on the nodes until its lease (with the drift) ends. */
  protected record(holding: Omit<MemoryHolding, 'expiresAt'>, lock: Lock): Lock {
    const expiresAt = lock.validUntil + drift(this.state.options, lock.ttl);
    this.state.leases.set(this.key, [...this.live(), { ...holding, expiresAt }]);
    this.owned.add(lock);
    return lock;
  }

  protected acquireLease(kind: string, options: AcquireOptions = {}): Promise<Lock> {
    const request: LeaseRequest = {
      ...memoryRequest(this.state.options, [this.name], [this.key], options),
      kind,
    };
    return acquireInMemory(this.state.line, request, {
      attempt: (r) => this.attempt(r),
      failed: (r, attempts, error, nodes) => this.host.failed(r, attempts, error, nodes),
      granted: (r) => {
        // Readers (or permits) behind it may be admitted too: the next in line asks now.
        if (r.waiter) leaveLine(this.state.line, r.waiter, true);
        r.waiter = undefined;
        wakeFor(this.state.line, [this.key]);
      },
      busyMessage: this.busyMessage(kind),
    });
  }

  /** One attempt: the handle, or how long the holders in the way keep it (busy). */
  private attempt(request: LeaseRequest): Lock | MemoryRefusal {
    if (this.state.closed) {
      throw new LockOptionsError(
        'The lock engine is closed; locks can no longer be taken with it.',
      );
    }
    if (request.signal?.aborted) {
      throw new LockAbortedError(request.resources, request.signal.reason);
    }
    this.checkNodes(request.resources);
    const now = performance.now();
    const live = this.live(now);
    if (!someoneAhead(this.state.line, request) && this.admits(request.kind, live)) {
      const token = this.state.options.fencing ? this.token(request.kind) : 0;
      const grant: LeaseGrant = {
        resources: [this.name],
        keys: [this.key],
        value: randomValue(),
        tokens: this.state.options.fencing ? [token] : [],
        ttl: request.ttl,
        validUntil: now + request.ttl - request.drift,
      };
      return this.grant(request.kind, grant, token, live);
    }
    const leases = this.blocking(request.kind, live).map((h) => h.expiresAt - now);
    return { busy: true, retryAfter: leases.length > 0 ? Math.max(...leases) : undefined };
  }

  /** Throws LockUnavailableError while fewer than a quorum of the nodes answer. */
  private checkNodes(resources: readonly string[], operation?: 'extend'): void {
    if (up(this.state) >= this.state.quorum) return;
    const round = nodeRound(this.state, () => true);
    const error = new LockUnavailableError(
      resources,
      round.failures,
      this.state.quorum,
      this.state.nodes.length,
      operation,
    );
    throw error;
  }

  protected async usingLease<T>(
    kind: string,
    routine: (lock: Lock) => T | Promise<T>,
    options: UsingOptions = {},
  ): Promise<T> {
    checkRoutine(routine);
    return this.acquireLease(kind, options).then((lock) =>
      holdWhile(lock, (ttl) => this.extend(lock, ttl), this.state.options, routine, options),
    );
  }

  /** Renews this holder's lease; LockLostError when its entry is gone. */
  async extend(lock: Lock, ttl?: number): Promise<Lock> {
    this.checkOwn(lock);
    const lease = ttl ?? lock.ttl;
    if (lock.isReleased) throw new LockLostError(lock.resources, 'it was already released');
    const now = performance.now();
    const holding = this.live(now).find((h) => h.value === lock.value);
    if (!holding || lock.validUntil <= now) {
      const why = 'the nodes no longer hold it (it expired or was released)';
      lock.lost(why);
      throw new LockLostError(lock.resources, why);
    }
    this.checkNodes(lock.resources, 'extend');
    holding.expiresAt = now + lease;
    lock.renewed(now + lease - drift(this.state.options, lease));
    return lock;
  }

  /** @internal Use `lock.release()`. */
  async releaseOnNodes(lock: Lock): Promise<ReleaseResult> {
    const now = performance.now();
    if (lock.validUntil <= now) lock.lost('its lease ran out before it was released');
    lock.released();
    const held = this.drop((h) => h.value === lock.value);
    const answering = up(this.state);
    return {
      released: held > 0 && answering >= this.state.quorum,
      nodesReleased: held > 0 ? answering : 0,
      nodesNotHeld: held > 0 ? 0 : answering,
      nodesPending: 0,
      failures: nodeRound(this.state, () => true).failures,
    };
  }

  /** @internal Told once when a holding is lost. */
  lockLost(): void {}

  /**
   * Releases every holding (or the one whose value is `holder`) and wakes
   * the waiters. Resolves with the entries deleted, summed over the nodes
   * that answer.
   */
  async forceRelease(holder?: string): Promise<number> {
    if (holder !== undefined && (typeof holder !== 'string' || holder === '')) {
      throw new LockOptionsError(
        `forceRelease() takes a holder's value as inspect() shows it, or nothing to release every holder (got ${String(holder)}).`,
      );
    }
    return this.drop((h) => holder === undefined || h.value === holder) * up(this.state);
  }

  /** Deletes the live holdings `which` picks and wakes the line; how many there were. */
  private drop(which: (holding: MemoryHolding) => boolean): number {
    const live = this.live();
    const kept = live.filter((holding) => !which(holding));
    if (kept.length > 0) this.state.leases.set(this.key, kept);
    else this.state.leases.delete(this.key);
    wakeFor(this.state.line, [this.key]);
    return live.length - kept.length;
  }

  /** What every simulated node holds, as each of them would answer. */
  protected nodeStates(now = performance.now()) {
    const live = this.live(now);
    return this.state.nodes.map((node) =>
      node.down
        ? {
            node: node.label,
            holders: undefined,
            line: undefined,
            fence: undefined,
            error: node.down.message,
          }
        : {
            node: node.label,
            holders: live.map((h) => ({
              value: h.value,
              ...(h.mode ? { mode: h.mode } : {}),
              ...(h.slot ? { slot: h.slot } : {}),
              lease: h.expiresAt - now,
              token: h.token,
            })),
            line: [],
            fence: this.state.leaseFences.get(this.key) ?? null,
          },
    );
  }

  protected abstract busyMessage(kind: string): string;

  private checkOwn(lock: Lock): void {
    if (!(lock instanceof Lock) || !this.owned.has(lock)) {
      throw new LockOptionsError(
        `Expected a holding of '${this.name}' returned by acquire(), tryAcquire() or using().`,
      );
    }
  }
}
