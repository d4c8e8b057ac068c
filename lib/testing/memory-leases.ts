/**
 * Read-write locks and semaphores of the in-memory engine: the semantics of
 * the real ones (many readers or one writer; at most N permits in numbered
 * slots; first come, first served, with readers queued together; a lease per
 * holder, extended on its own; rising fencing tokens; the same errors)
 * without Redis. Every simulated node holds the same entries, so a holding
 * stands or falls on all of them at once; with fewer than a quorum of nodes
 * answering (`failNodes()`), calls fail with LockUnavailableError.
 */
import {
  checkMode,
  checkPermits,
  judgeReadWrite,
  judgeSemaphore,
  Permit,
  ReadWriteHold,
  readWriteBusyMessage,
  singleAttempt,
  semaphoreBusyMessage,
  type AcquireOptions,
  type TryAcquireOptions,
  type LeaseGrant,
  type Lock,
  type LockMode,
  type ReadWriteInspection,
  type ReadWriteLock,
  type Semaphore,
  type SemaphoreInspection,
  type UsingOptions,
} from '../engine/internal.js';
import { MemoryLeasePrimitive, type LeaseHost } from './memory-lease-primitive.js';
import type { MemoryHolding } from './memory-state.js';

export type { LeaseHost } from './memory-lease-primitive.js';

/** The in-memory engine's read-write lock: the surface of `ReadWriteLock`. */
export class MemoryReadWriteLock extends MemoryLeasePrimitive {
  /** @internal Made by the in-memory engine's readWriteLock(). */
  constructor(host: LeaseHost, resource: string) {
    super(host, resource, 'rw');
  }

  async acquire(mode: LockMode, options?: AcquireOptions): Promise<ReadWriteHold> {
    return (await this.acquireLease(checkMode(mode), options)) as ReadWriteHold;
  }

  async tryAcquire(mode: LockMode, options: TryAcquireOptions = {}): Promise<ReadWriteHold> {
    return (await this.acquireLease(checkMode(mode), singleAttempt(options))) as ReadWriteHold;
  }

  async using<T>(
    mode: LockMode,
    routine: (hold: ReadWriteHold) => T | Promise<T>,
    options?: UsingOptions,
  ): Promise<T> {
    return this.usingLease(checkMode(mode), routine as (lock: Lock) => T | Promise<T>, options);
  }

  async inspect(): Promise<ReadWriteInspection> {
    return judgeReadWrite(this.name, this.nodeStates(), this.state.quorum);
  }

  protected admits(mode: string, live: readonly MemoryHolding[]): boolean {
    return mode === 'read' ? live.every((h) => h.mode === 'read') : live.length === 0;
  }

  protected blocking(mode: string, live: readonly MemoryHolding[]): MemoryHolding[] {
    return mode === 'read' ? live.filter((h) => h.mode === 'write') : [...live];
  }

  protected token(mode: string): number {
    return mode === 'write' ? this.nextToken() : this.lastToken();
  }

  protected grant(mode: string, grant: LeaseGrant, token: number): Lock {
    const hold = new ReadWriteHold(this as unknown as ReadWriteLock, mode as LockMode, grant);
    return this.record({ value: grant.value, mode: mode as LockMode, token }, hold);
  }

  protected busyMessage(mode: string): string {
    return readWriteBusyMessage(this.name, mode);
  }
}

/** The in-memory engine's semaphore: the surface of `Semaphore`. */
export class MemorySemaphore extends MemoryLeasePrimitive {
  /** @internal Made by the in-memory engine's semaphore(). */
  constructor(
    host: LeaseHost,
    name: string,
    readonly permits: number,
  ) {
    super(host, name, 'sem');
    checkPermits(this.name, permits);
  }

  acquire(options?: AcquireOptions): Promise<Permit> {
    return this.acquireLease('permit', options) as Promise<Permit>;
  }

  async tryAcquire(options: TryAcquireOptions = {}): Promise<Permit> {
    return (await this.acquireLease('permit', singleAttempt(options))) as Permit;
  }

  using<T>(routine: (permit: Permit) => T | Promise<T>, options?: UsingOptions): Promise<T> {
    return this.usingLease('permit', routine as (lock: Lock) => T | Promise<T>, options);
  }

  async inspect(): Promise<SemaphoreInspection> {
    return judgeSemaphore(this.name, this.nodeStates(), this.state.quorum, this.permits);
  }

  protected admits(_kind: string, live: readonly MemoryHolding[]): boolean {
    return live.length < this.permits;
  }

  protected blocking(_kind: string, live: readonly MemoryHolding[]): MemoryHolding[] {
    // Free once the first of them ends.
    const first = Math.min(...live.map((h) => h.expiresAt));
    return live.filter((h) => h.expiresAt === first);
  }

  protected token(): number {
    return this.nextToken();
  }

  protected grant(
    _kind: string,
    grant: LeaseGrant,
    token: number,
    live: readonly MemoryHolding[],
  ): Lock {
    // The lowest free slot, as the nodes pick it for a caller with nobody ahead.
    let slot = 1;
    while (live.some((h) => h.slot === slot)) slot++;
    const permit = new Permit(this as unknown as Semaphore, slot, grant);
    return this.record({ value: grant.value, slot, token }, permit);
  }

  protected busyMessage(): string {
    return semaphoreBusyMessage(this.name, this.permits);
  }
}
