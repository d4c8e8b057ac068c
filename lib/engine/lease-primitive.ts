import { acquireWith } from './acquisition.js';
import { callRequest, fenceSeed, singleAttempt } from './call-request.js';
import type { EngineContext } from './engine-context.js';
import { type LeaseGrant, type Lock, type LockOwner, type ReleaseResult } from './lock.js';
import { LockOptionsError, type LockLostError } from './lock-errors.js';
import type { LockNode } from './lock-node.js';
import type { AcquireOptions, TryAcquireOptions, UsingOptions } from './lock-options.js';
import type { LuaScript } from './lua-scripts.js';
import { LeaseAttempts, type LeaseReply, type LeaseRequest } from './lease-attempt.js';
import { extendLease, releaseLease } from './lease-rounds.js';
import { holdWhile } from './lease-renewal.js';
import { bounded } from './time-bound.js';
import { checkRoutine } from './option-checks.js';

/** A semaphore permit's slot; undefined for other holdings. */
const slotOf = (lock: Lock): number | undefined =>
  'slot' in lock && typeof lock.slot === 'number' ? lock.slot : undefined;

/**
 * What read-write locks and semaphores share: a lease on each node (an entry
 * of the resource's holders hash, not a key of its own), granted by a quorum
 * within the same validity arithmetic as a lock (`ttl - drift` from the start
 * of the attempt), fencing tokens settled as a lock's are (the highest among
 * the granting nodes, written back where they differ), the engine's
 * acquisition loop (waits woken by releases through its channel, the
 * shutdown), and automatic extension for `using()`.
 *
 * The handles are plain {@link Lock}s whose owner is this object: `token`,
 * `signal`, `extend()`, `release()` and `await using` work as for a lock.
 */
export abstract class LeasePrimitive implements LockOwner {
  /** The resource's lock key, `<keyPrefix>{<name>}`: every key below shares its hash tag. */
  protected readonly lockKey: string;
  /** The holders hash; releases publish on its channel, which wakes the waiters. */
  protected readonly channelKey: string;
  /** The nodes' line of waiters. */
  protected readonly lineKey: string;
  /**
   * @internal How many of this process's waiters a release wakes: every one for a
   * read-write lock (readers go together), one for a semaphore's permit.
   */
  protected readonly wakesPerRelease: number = Infinity;
  /** What the engine's acquisition loop calls: one attempt, and leaving the lines. */
  private readonly attempts: LeaseAttempts;

  constructor(
    protected readonly context: EngineContext,
    /** What errors name: the resource, checked as a lock's. */
    readonly name: string,
    suffix: string,
    private readonly scripts: {
      readonly writeback: LuaScript;
      readonly extend: LuaScript;
      readonly release: LuaScript;
    },
  ) {
    this.lockKey = context.lockKey(name);
    this.channelKey = `${this.lockKey}:${suffix}`;
    this.lineKey = `${this.channelKey}:q`;
    this.attempts = new LeaseAttempts({
      context,
      name,
      channelKey: this.channelKey,
      acquire: (node, kind, value, request, joinLine) =>
        this.acquireCall(node, kind, value, request, joinLine),
      writeback: (node, value, token, slot) => {
        const counter = context.counter(node, this.lockKey);
        return node.run(
          scripts.writeback,
          [this.channelKey, counter.key],
          [value, counter.ttl, token, ...this.where(slot)],
        );
      },
      release: (node, value) => this.releaseCall(node, value),
      leaveLine: (node, waiter) => node.client.hdel(this.lineKey, waiter),
      handle: (kind, grant, slot) => this.handle(kind, grant, slot),
    });
  }

  /** One node's acquisition call (see {@link fencingArgs} for the shared part). */
  protected abstract acquireCall(
    node: LockNode,
    kind: string,
    value: string,
    request: LeaseRequest,
    joinLine: boolean,
  ): Promise<LeaseReply>;
  /** What identifies a holding on a node besides its value (a semaphore's slot). */
  protected abstract where(slot: number | undefined): (string | number)[];
  /** Makes the handle of a grant. */
  protected abstract handle(kind: string, grant: LeaseGrant, slot: number | undefined): Lock;
  /** The message of a first attempt's LockBusyError, in this primitive's words. */
  protected abstract busyMessage(kind: string): string;
  /** The holders' values in a node's holders hash (field -> entry). */
  protected abstract holderValues(hash: Readonly<Record<string, string>>): string[];

  /**
   * For operators, when a holder is stuck: releases every holding of this
   * name (or only the one whose value is `holder`, as `inspect()` shows it)
   * on every node that answers, and wakes the waiters as a release does.
   * The holders are not told; their fencing tokens keep their late writes
   * out. Resolves with how many entries were deleted, summed over the nodes
   * (0: nothing held there any more); never rejects over a node that fails.
   */
  async forceRelease(holder?: string): Promise<number> {
    if (holder !== undefined && (typeof holder !== 'string' || holder === '')) {
      throw new LockOptionsError(
        `forceRelease() takes a holder's value as inspect() shows it, or nothing to release every holder (got ${String(holder)}).`,
      );
    }
    const timeout = this.context.nodeTimeout(this.context.options.ttl) * 5;
    const deleted = await Promise.all(
      this.context.nodes.map(async (node) => {
        try {
          const values =
            holder === undefined
              ? this.holderValues(await bounded(node.client.hgetall(this.channelKey), timeout))
              : [holder];
          const removed = await Promise.all(
            // Waiters are woken even where this engine does not listen for releases itself.
            values.map((value) => bounded(this.releaseCall(node, value, '1'), timeout)),
          );
          return removed.reduce<number>((sum, n) => sum + Number(n), 0);
        } catch {
          return 0;
        }
      }),
    );
    return deleted.reduce((sum, n) => sum + n, 0);
  }

  /**
   * KEYS and ARGV every acquisition script starts with: the holders hash, the
   * line and the node's fence counter; then fencing '1' | '0', the seed of a
   * new counter and the counter's TTL.
   */
  protected fencingArgs(node: LockNode): {
    keys: string[];
    fencing: (string | number)[];
  } {
    const { options } = this.context;
    const counter = this.context.counter(node, this.lockKey);
    return {
      keys: [this.channelKey, this.lineKey, counter.key],
      fencing: [options.fencing ? '1' : '0', fenceSeed(options), counter.ttl],
    };
  }

  private releaseCall(node: LockNode, value: string, notify = this.context.notify) {
    // A cluster's message stays on the key's shard (SPUBLISH), as the plain lock's does.
    const { sender } = this.context;
    return node.run(
      this.scripts.release,
      [this.channelKey, this.lineKey],
      [value, node.topology === 'cluster' && notify === '1' ? 's' : notify, sender],
    );
  }

  /** Waits per the retry policy; throws LockTimeoutError when it stays busy. */
  protected async acquireLease(kind: string, options: AcquireOptions = {}): Promise<Lock> {
    const request: LeaseRequest = callRequest(
      this.context,
      [this.name],
      [this.channelKey],
      // A queue of its own: any release heard on the key wakes it (readers and permits can be
      // admitted several at once, so waiters of this process do not wait behind each other).
      undefined,
      options,
      this.busyMessage(kind),
      { kind, hint: undefined, splits: undefined },
    );
    return await acquireWith(this.context, request, this.attempts);
  }

  protected async tryLease(kind: string, options: TryAcquireOptions = {}): Promise<Lock> {
    return this.acquireLease(kind, singleAttempt(options));
  }

  protected async usingLease<T>(
    kind: string,
    routine: (lock: Lock) => T | Promise<T>,
    options: UsingOptions = {},
  ): Promise<T> {
    checkRoutine(routine);
    const lock = await this.acquireLease(kind, options);
    return holdWhile(
      lock,
      (ttl, budget) => this.extend(lock, ttl, budget),
      this.context.options,
      routine,
      options,
    );
  }

  /**
   * Renews the lease on every node where this holder's entry is live, counted
   * only when a quorum renews it before the current validity ends. Throws
   * LockLostError when the entry is gone (and aborts the signal), or
   * LockUnavailableError when too few nodes answered.
   */
  extend(lock: Lock, ttl?: number, timeout?: number): Promise<Lock> {
    return extendLease(this.context, lock, ttl, timeout, (node, leaseTtl) =>
      node.run(
        this.scripts.extend,
        [this.channelKey],
        [lock.value, leaseTtl, ...this.where(slotOf(lock))],
      ),
    );
  }

  /** @internal Use `lock.release()`. */
  releaseOnNodes(lock: Lock): Promise<ReleaseResult> {
    return releaseLease(
      this.context,
      lock,
      (node) => this.releaseCall(node, lock.value),
      this.wakesPerRelease,
    );
  }

  /** @internal Called by a holding that was lost. */
  lockLost(lock: Lock, error: LockLostError): void {
    this.context.lost(lock, error);
  }
}
