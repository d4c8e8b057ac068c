import {
  acquireWith,
  checkCanAttempt,
  refusalOf,
  type Acquirer,
  type Grant,
  type Refusal,
} from './acquisition.js';
import { callRequest, fenceSeed, SINGLE_ATTEMPT, type CallRequest } from './call-request.js';
import type { EngineContext } from './engine-context.js';
import { type LeaseGrant, type Lock, type LockOwner, type ReleaseResult } from './lock.js';
import { LockOptionsError, type LockLostError } from './lock-errors.js';
import type { LockNode } from './lock-node.js';
import type { AcquireOptions, UsingOptions } from './lock-options.js';
import type { LuaScript } from './lua-scripts.js';
import { leaseValue } from './lease-value.js';
import { extendLease, releaseLease } from './lease-rounds.js';
import { holdWhile } from './lease-renewal.js';
import { quorumRound } from './quorum-round.js';
import { bounded } from './time-bound.js';
import { settleTokens } from './token-settlement.js';

/** One node's answer to an acquisition, in a shape common to both primitives. */
export interface LeaseReply {
  readonly granted: boolean;
  /** Fencing token, when granted with fencing on. */
  readonly token?: number;
  /** A semaphore's permit slot, when granted. */
  readonly slot?: number;
  /** When refused: ms until the holders in the way are gone; -3: only the line is in the way. */
  readonly wait?: number;
  /**
   * When refused for the line while permits are free: the waiters ahead that
   * should take them, as a release message names them (a semaphore's).
   */
  readonly heads?: string;
}

/** One acquisition of a lease as the loop tracks it. */
export interface LeaseRequest extends CallRequest {
  /** What is asked for: a read-write lock's mode, a semaphore's permit. */
  readonly kind: string;
  /** A semaphore's preferred slot for the next attempt, learnt from a split vote. */
  hint?: number;
  /** Split votes so far: only the first is retried at once. */
  splits?: number;
}

/** A semaphore permit's slot; undefined for other holdings. */
const slotOf = (lock: Lock): number | undefined =>
  'slot' in lock && typeof lock.slot === 'number' ? lock.slot : undefined;

const isGrant = (reply: LeaseReply) => reply.granted;
const grantSlot = (reply: LeaseReply) => reply.slot;
const waitOf = (reply: LeaseReply) => (reply.granted ? undefined : (reply.wait ?? -1));

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
    return await acquireWith(this.context, request, this.acquirer);
  }

  protected tryLease(kind: string, options: Omit<AcquireOptions, 'retry' | 'waitTimeout'> = {}) {
    return this.acquireLease(kind, { ...options, retry: SINGLE_ATTEMPT });
  }

  protected async usingLease<T>(
    kind: string,
    routine: (lock: Lock) => T | Promise<T>,
    options: UsingOptions = {},
  ): Promise<T> {
    const lock = await this.acquireLease(kind, options);
    return holdWhile(
      lock,
      (ttl, budget) => this.extend(lock, ttl, budget),
      this.context.options,
      routine,
      options,
    );
  }

  /** What the engine's acquisition loop calls: one attempt, and leaving the lines. */
  private readonly acquirer: Acquirer<LeaseRequest> = {
    attempt: (request) => this.attempt(request),
    leaveLines: (request) => this.leaveLines(request),
  };

  /** One attempt on every node. */
  private async attempt(request: LeaseRequest): Promise<Grant | Refusal> {
    const { context } = this;
    checkCanAttempt(context, request);
    const { kind } = request;
    const value = leaseValue();
    const start = performance.now();
    const validUntil = start + request.ttl - request.drift;
    if (request.waiter === '') request.waiter = value;
    // Every attempt of an acquisition that may wait takes (or keeps) its place in the nodes'
    // lines, the first too: refused, it then waits for a release rather than asking again at
    // once to join them (three attempts per contended grant otherwise).
    const joinLine = request.lineLease > 0;
    const { fencing } = context.options;
    const round = await quorumRound(
      context.nodes,
      (node, i) => {
        const send = async () => {
          const reply = await this.acquireCall(node, kind, value, request, joinLine);
          if (!reply.granted) return reply;
          const excluded = context.excluded(i);
          if (excluded !== undefined)
            throw new Error(`granted, but not counted toward the quorum: ${excluded}`);
          if (fencing && typeof reply.token !== 'number')
            throw new Error('granted, but without a fencing token; not counted toward the quorum');
          return reply;
        };
        const checking = context.pending(i);
        return checking ? checking.then(send) : send();
      },
      isGrant,
      context.quorum,
      request.nodeTimeout,
      grantSlot,
    );
    // Free permits that the waiters ahead are not asking for: this process's named ones ask
    // now (the nodes published the same names for the other processes).
    for (const reply of round.replies) {
      if (reply?.heads) context.queues.released(this.channelKey, reply.heads);
    }
    if (joinLine) request.inLine = true;
    // The slot a quorum granted (a read-write lock has none: every grant agrees).
    const bySlot = new Map<number | undefined, number[]>();
    round.replies.forEach((reply, i) => {
      if (!reply?.granted) return;
      const list = bySlot.get(reply.slot) ?? [];
      list.push(i);
      bySlot.set(reply.slot, list);
    });
    let best: [number | undefined, number[]] | undefined;
    for (const entry of bySlot) if (!best || entry[1].length > best[1].length) best = entry;
    if (best && best[1].length >= context.quorum) {
      const [slot, granting] = best;
      let tokens: number[] | undefined;
      try {
        tokens = fencing
          ? await this.settle(round, granting, request, value, slot, validUntil)
          : [];
      } catch (error) {
        this.cleanUp(value);
        throw error;
      }
      if (tokens !== undefined && performance.now() < validUntil) {
        // Nodes that granted our value another slot (a split vote) give it back; a late grant
        // of another slot expires unextended, or goes with our release.
        if (bySlot.size > 1) {
          for (const [other, nodes] of bySlot) {
            if (other === slot) continue;
            for (const i of nodes) this.releaseCall(context.nodes[i], value).catch(() => undefined);
          }
        }
        return {
          lock: this.handle(
            kind,
            {
              resources: [this.name],
              keys: [this.channelKey],
              value,
              tokens,
              ttl: request.ttl,
              validUntil,
            },
            slot,
          ),
          round,
        };
      }
    }
    // Nothing to take back where every node answered no; a node that granted, failed or did
    // not answer may hold our value (a late grant), and gets a release after its acquisition.
    if (round.yes > 0 || round.failed > 0 || round.no < context.nodes.length) this.cleanUp(value);
    if (bySlot.size > 1) {
      request.splits = (request.splits ?? 0) + 1;
      // The slot most nodes offered; among equals the highest: a node offers its lowest free
      // slot, so one that offered a higher slot has the lower ones taken.
      let hint: [number, number] | undefined;
      for (const [offered, nodes] of bySlot) {
        if (offered === undefined) continue;
        if (!hint || nodes.length > hint[1] || (nodes.length === hint[1] && offered > hint[0]))
          hint = [offered, nodes.length];
      }
      request.hint = hint?.[0];
      // Grants of different slots: contention, not an outage. The first split is asked again
      // at once (with the slot most nodes offered as the hint); later ones wait as a busy lock
      // does, so that waiters whose nodes have no free slot in common do not spin.
      const refusal = refusalOf(context, round, request, waitOf, false);
      return { ...refusal, busy: true, retryAfter: undefined, again: request.splits === 1 };
    }
    // Free but for earlier waiters: every attempt is ranked by its arrival, so asking again at
    // once would rank it the same; it waits for a release, or for the nodes to name it.
    return refusalOf(context, round, request, waitOf, false);
  }

  /** The token of a grant, settled over the nodes that granted `slot`. */
  private settle(
    round: Awaited<ReturnType<typeof quorumRound<LeaseReply>>>,
    granting: readonly number[],
    request: LeaseRequest,
    value: string,
    slot: number | undefined,
    validUntil: number,
  ) {
    return settleTokens(
      this.context,
      {
        round,
        granting,
        count: 1,
        tokenOf: (reply) => reply.token!,
        overflow: () => ({ resource: this.name, counters: 'its fence counters' }),
      },
      validUntil,
      request.nodeTimeout,
      (node, tokens) => {
        const counter = this.context.counter(node, this.lockKey);
        return node.run(
          this.scripts.writeback,
          [this.channelKey, counter.key],
          [value, counter.ttl, tokens[0], ...this.where(slot)],
        );
      },
    );
  }

  /** Best-effort release of a failed attempt on every node, including those that did not answer. */
  private cleanUp(value: string): void {
    for (const node of this.context.nodes) this.releaseCall(node, value).catch(() => undefined);
  }

  /** Granted or not, a place left in a node's line would rank ahead of later waiters. */
  private leaveLines(request: LeaseRequest): void {
    for (const node of this.context.nodes)
      node.client.hdel(this.lineKey, request.waiter).catch(() => undefined);
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
