import { grantParts, Lock, type LeaseGrant } from './lock.js';
import { LockOptionsError } from './lock-errors.js';
import { describe } from './option-checks.js';
import type { LockNode } from './lock-node.js';
import type { AcquireOptions, TryAcquireOptions, UsingOptions } from './lock-options.js';
import type { LeaseReply, LeaseRequest } from './lease-attempt.js';
import { LeasePrimitive } from './lease-primitive.js';
import type { EngineContext } from './engine-context.js';
import { SEM_ACQUIRE, SEM_EXTEND, SEM_RELEASE, SEM_WRITEBACK } from './semaphore-lua.js';
import { inspectLeases } from './admin/lease-inspection.js';
import type { SemaphoreInspection } from './admin/lease-verdict.js';

/** The most permits a semaphore may have: each attempt may scan its slots. */
export const MAX_PERMITS = 10_000;

/**
 * A permit of a semaphore: a {@link Lock} (token, signal, extend, release,
 * `await using`) that also says which of the N slots it holds.
 */
export class Permit extends Lock {
  /** @internal Created by {@link Semaphore} only. */
  constructor(
    owner: Semaphore,
    /**
     * The permit's slot, 1 to N. No two valid permits hold the same slot, and
     * a slot's tokens rise from holder to holder: fence what a permit guards
     * by (semaphore, slot) when holders of different slots may write it too.
     */
    readonly slot: number,
    grant: LeaseGrant,
  ) {
    super(owner, ...grantParts(grant));
  }
}

type Reply = [granted: 0 | 1, slotOrWait?: number, tokenOrHeads?: number | string];

/**
 * At most N holders at once across every instance, over the engine's nodes
 * with the lock's quorum, validity, extension and fencing rules
 * (docs/semaphores.md). Each permit is one of N numbered slots, granted by a
 * quorum as a lock is; waiters take their turn by arrival in the nodes' line
 * and wake on releases.
 *
 * N is given by each caller: a grant needs fewer than N live permits where
 * it is asked, so raising N admits more at once, and lowering it admits no
 * one until the permits above the new N are given back (nobody is evicted).
 *
 * @example
 * const payments = semaphore(engine, 'payments-api', 4); // LockService: locks.semaphore('payments-api', 4)
 * await payments.using(() => provider.charge(order));
 */
export class Semaphore extends LeasePrimitive {
  /** @internal A release frees one permit: it wakes the earliest of this process's waiters, not all. */
  protected override readonly wakesPerRelease = 1;

  /** @internal Made by `semaphore()` (lease-parts.ts). */
  constructor(
    context: EngineContext,
    name: string,
    /** How many permits may be held at once. */
    readonly permits: number,
  ) {
    const checked = context.resourceName(name);
    checkPermits(checked, permits);
    super(context, checked, 'sem', {
      writeback: SEM_WRITEBACK,
      extend: SEM_EXTEND,
      release: SEM_RELEASE,
    });
  }

  /** Waits for a permit per the retry policy (LockTimeoutError when none frees up in time). */
  acquire(options?: AcquireOptions): Promise<Permit> {
    return this.acquireLease('permit', options) as Promise<Permit>;
  }

  /** One attempt: a permit, or LockBusyError (with retryAfter) when all are taken. */
  tryAcquire(options?: TryAcquireOptions): Promise<Permit> {
    return this.tryLease('permit', options) as Promise<Permit>;
  }

  /** Runs `routine` with a permit, extending its lease meanwhile, and always gives it back. */
  using<T>(routine: (permit: Permit) => T | Promise<T>, options?: UsingOptions): Promise<T> {
    return this.usingLease('permit', routine as (lock: Lock) => T | Promise<T>, options);
  }

  /**
   * What the nodes hold for this semaphore now: each node's permits (slot,
   * lease, token) and line of waiters, and the verdict (held, free, or
   * unknown when too few nodes answer), with this object's N as `permits`.
   * A snapshot for operators and health checks: acquire a permit to act on it.
   */
  async inspect(): Promise<SemaphoreInspection> {
    const { nodes, options, quorum } = this.context;
    const timeout = this.context.nodeTimeout(options.ttl) * 5;
    const { semaphore } = await inspectLeases(
      nodes,
      options.keyPrefix,
      this.name,
      quorum,
      timeout,
      this.permits,
    );
    return semaphore;
  }

  protected busyMessage(): string {
    return semaphoreBusyMessage(this.name, this.permits);
  }

  protected async acquireCall(
    node: LockNode,
    _kind: string,
    value: string,
    request: LeaseRequest,
    joinLine: boolean,
  ): Promise<LeaseReply> {
    const { keys, fencing } = this.fencingArgs(node);
    const args = [value, this.permits, request.ttl, ...fencing, request.hint ?? 0];
    if (joinLine) {
      const { notify, sender } = this.context;
      // A cluster's message stays on the key's shard (SPUBLISH), as a release's does.
      const mode = node.topology === 'cluster' && notify === '1' ? 's' : notify;
      args.push(request.waiter, request.arrival, request.lineLease, mode, sender);
    }
    const reply = (await node.run(SEM_ACQUIRE, keys, args)) as Reply;
    if (reply[0] === 1) return { granted: true, slot: reply[1], token: reply[2] as number };
    return { granted: false, wait: reply[1], heads: reply[2] as string | undefined };
  }

  /** A holders hash maps each slot to 'value expiry token'. */
  protected holderValues(hash: Readonly<Record<string, string>>): string[] {
    return [...new Set(Object.values(hash).map((entry) => entry.split(' ')[0]))];
  }

  protected where(slot: number | undefined): [number] {
    return [slot ?? 0];
  }

  protected handle(_kind: string, grant: LeaseGrant, slot: number | undefined): Lock {
    return new Permit(this, slot ?? 0, grant);
  }
}

/** Throws LockOptionsError unless `permits` is a whole number from 1 to MAX_PERMITS. */
export function checkPermits(name: string, permits: unknown): void {
  if (!Number.isInteger(permits) || (permits as number) < 1 || (permits as number) > MAX_PERMITS) {
    throw new LockOptionsError(
      `A semaphore has a whole number of permits from 1 to ${MAX_PERMITS} (got ${describe(permits)} for '${name}').`,
    );
  }
}

/** The message of a first attempt's LockBusyError on a semaphore. */
export function semaphoreBusyMessage(name: string, permits: number): string {
  return (
    `All ${permits} permits of '${name}' are held, or earlier waiters take the free ones; ` +
    'retry later, acquire with a wait (retry options) instead of a single attempt, or raise the permits.'
  );
}
