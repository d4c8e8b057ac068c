import {
  checkCanAttempt,
  refusalOf,
  type Acquirer,
  type Grant,
  type Refusal,
} from './acquisition.js';
import { nameWaiter, type CallRequest } from './call-request.js';
import type { EngineContext } from './engine-context.js';
import type { LeaseGrant, Lock } from './lock.js';
import type { LockNode } from './lock-node.js';
import { leaseValue } from './lease-value.js';
import { quorumRound, type RoundResult } from './quorum-round.js';
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

/** What an attempt needs of its read-write lock or semaphore. */
export interface LeaseParts {
  readonly context: EngineContext;
  /** The resource, as errors and handles name it. */
  readonly name: string;
  /** The holders hash: the key a handle carries, and the channel its releases wake. */
  readonly channelKey: string;
  /** One node's acquisition call. */
  acquire(
    node: LockNode,
    kind: string,
    value: string,
    request: LeaseRequest,
    joinLine: boolean,
  ): Promise<LeaseReply>;
  /** Writes a settled token back to a node that granted with a lower one. */
  writeback(
    node: LockNode,
    value: string,
    token: number,
    slot: number | undefined,
  ): Promise<unknown>;
  /** Deletes the holding of `value` on a node and wakes its waiters. */
  release(node: LockNode, value: string): Promise<unknown>;
  /** Drops a waiter's place in a node's line. */
  leaveLine(node: LockNode, waiter: string): Promise<unknown>;
  /** Makes the handle of a grant. */
  handle(kind: string, grant: LeaseGrant, slot: number | undefined): Lock;
}

const isGrant = (reply: LeaseReply) => reply.granted;
const grantSlot = (reply: LeaseReply) => reply.slot;
const waitOf = (reply: LeaseReply) => (reply.granted ? undefined : (reply.wait ?? -1));

/**
 * The single attempt of a read-write lock or a semaphore: the primitive's
 * acquisition on every node, a quorum that agrees on one slot within the
 * validity `ttl - drift`, fencing tokens settled as a lock's are, and a
 * clean-up of a failed attempt on every node. A split vote (grants of
 * different slots) is contention: the first is asked again at once with the
 * slot most nodes offered as a hint.
 */
export class LeaseAttempts implements Acquirer<LeaseRequest> {
  constructor(private readonly parts: LeaseParts) {}

  /** One attempt on every node. */
  async attempt(request: LeaseRequest): Promise<Grant | Refusal> {
    const { context } = this.parts;
    checkCanAttempt(context, request);
    const { kind } = request;
    const value = leaseValue();
    const start = performance.now();
    const validUntil = start + request.ttl - request.drift;
    nameWaiter(context, request, value);
    // Every attempt of an acquisition that may wait takes (or keeps) its place in the nodes'
    // lines, the first too: refused, it then waits for a release rather than asking again at
    // once to join them (three attempts per contended grant otherwise).
    const joinLine = request.lineLease > 0;
    const { fencing } = context.options;
    const round = await quorumRound(
      context.nodes,
      (node, i) => {
        const send = async () => {
          const reply = await this.parts.acquire(node, kind, value, request, joinLine);
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
      if (reply?.heads) context.queues.released(this.parts.channelKey, reply.heads);
    }
    if (joinLine) request.inLine = true;
    const bySlot = votesBySlot(round);
    const best = mostVotes(bySlot);
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
        for (const [other, nodes] of bySlot) {
          if (other === slot) continue;
          for (const i of nodes) this.parts.release(context.nodes[i], value).catch(() => undefined);
        }
        const grant = {
          resources: [this.parts.name],
          keys: [this.parts.channelKey],
          value,
          tokens,
          ttl: request.ttl,
          validUntil,
        };
        return { lock: this.parts.handle(kind, grant, slot), round };
      }
    }
    // Nothing to take back where every node answered no; a node that granted, failed or did
    // not answer may hold our value (a late grant), and gets a release after its acquisition.
    if (round.yes > 0 || round.failed > 0 || round.no < context.nodes.length) this.cleanUp(value);
    if (bySlot.size > 1) {
      request.splits = (request.splits ?? 0) + 1;
      request.hint = splitHint(bySlot);
      // Grants of different slots: contention, not an outage. The first split is asked again
      // at once (with the slot most nodes offered as the hint); later ones wait as a busy lock
      // does, so that waiters whose nodes have no free slot in common do not spin.
      const refusal = refusalOf(context, round, request, waitOf);
      return { ...refusal, busy: true, retryAfter: undefined, again: request.splits === 1 };
    }
    // Free but for earlier waiters: every attempt is ranked by its arrival, so asking again at
    // once would rank it the same; it waits for a release, or for the nodes to name it.
    return refusalOf(context, round, request, waitOf);
  }

  /** Granted or not, a place left in a node's line would rank ahead of later waiters. */
  leaveLines(request: LeaseRequest): void {
    for (const node of this.parts.context.nodes)
      this.parts.leaveLine(node, request.waiter).catch(() => undefined);
  }

  /** The token of a grant, settled over the nodes that granted `slot`. */
  private settle(
    round: RoundResult<LeaseReply>,
    granting: readonly number[],
    request: LeaseRequest,
    value: string,
    slot: number | undefined,
    validUntil: number,
  ) {
    return settleTokens(
      this.parts.context,
      {
        round,
        granting,
        count: 1,
        tokenOf: (reply) => reply.token!,
        overflow: () => ({ resource: this.parts.name, counters: 'its fence counters' }),
      },
      validUntil,
      request.nodeTimeout,
      (node, tokens) => this.parts.writeback(node, value, tokens[0], slot),
    );
  }

  /** Best-effort release of a failed attempt on every node, including those that did not answer. */
  private cleanUp(value: string): void {
    for (const node of this.parts.context.nodes)
      this.parts.release(node, value).catch(() => undefined);
  }
}

/** The nodes that granted, by the slot each granted (a read-write lock has none: all agree). */
function votesBySlot(round: RoundResult<LeaseReply>): Map<number | undefined, number[]> {
  const bySlot = new Map<number | undefined, number[]>();
  round.replies.forEach((reply, i) => {
    if (!reply?.granted) return;
    const list = bySlot.get(reply.slot) ?? [];
    list.push(i);
    bySlot.set(reply.slot, list);
  });
  return bySlot;
}

/** The slot the most nodes granted, with those nodes. */
function mostVotes(
  bySlot: Map<number | undefined, number[]>,
): [number | undefined, number[]] | undefined {
  let best: [number | undefined, number[]] | undefined;
  for (const entry of bySlot) if (!best || entry[1].length > best[1].length) best = entry;
  return best;
}

/**
 * The slot to ask for after a split vote: the one most nodes offered; among
 * equals the highest, since a node offers its lowest free slot, so one that
 * offered a higher slot has the lower ones taken.
 */
function splitHint(bySlot: Map<number | undefined, number[]>): number | undefined {
  let hint: [number, number] | undefined;
  for (const [offered, nodes] of bySlot) {
    if (offered === undefined) continue;
    if (!hint || nodes.length > hint[1] || (nodes.length === hint[1] && offered > hint[0]))
      hint = [offered, nodes.length];
  }
  return hint?.[0];
}
