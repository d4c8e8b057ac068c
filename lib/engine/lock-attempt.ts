import {
  checkCanAttempt,
  refusalOf,
  type Acquirer,
  type Grant,
  type Refusal,
} from './acquisition.js';
import { fenceSeed, nameWaiter, type CallRequest } from './call-request.js';
import type { EngineContext } from './engine-context.js';
import { Lock, type LockOwner } from './lock.js';
import { leaseValue } from './lease-value.js';
import type { LockNode } from './lock-node.js';
import { ACQUIRE, FENCE_WRITEBACK, RELEASE } from './lua-scripts.js';
import { quorumRound, type RoundResult } from './quorum-round.js';
import { settleTokens } from './token-settlement.js';

/** A node's answer to ACQUIRE: granted (with a token per key), or refused (with ms to wait). */
type AcquireReply = [granted: 0 | 1, ...rest: number[]];

/** A lock's acquisition: a request with the keys ACQUIRE takes on a node that counts for all. */
export interface LockRequest extends CallRequest {
  /** Lock keys followed by the node's fence counter (ACQUIRE on a node that counts for all resources). */
  readonly acquireKeys: readonly string[];
}

const isGranted = (reply: AcquireReply) => reply[0] === 1;

/** A grant by a node whose grants do not count now (see RestartWatch) fails that node's part. */
function uncounted(reply: AcquireReply, why: string): AcquireReply {
  if (isGranted(reply)) throw new Error(`granted, but not counted toward the quorum: ${why}`);
  return reply;
}

/**
 * A fenced grant carries a token per resource. One found again after a resend
 * reads its counter back, and a counter deleted or evicted meanwhile gives
 * none: that node's grant then cannot vouch for a token, and does not count
 * (thrown: the round counts the node as failed).
 */
function isGrantedWithTokens(reply: AcquireReply, count: number): boolean {
  if (!isGranted(reply)) return false;
  for (let r = 1; r <= count; r++) {
    if (typeof reply[r] !== 'number') {
      throw new Error(
        'granted, but without a fencing token (its fence counter was deleted or evicted); not counted toward the quorum',
      );
    }
  }
  return true;
}

/** A refusing node's wait (ms until its holder's lease ends; -3: only the line is in the way). */
const waitOf = (reply: AcquireReply) => (reply[0] === 0 ? reply[1] : undefined);

/**
 * The plain lock's single attempt: ACQUIRE on every node (a key per
 * resource), a quorum within the validity `ttl - drift`, fencing tokens
 * settled, and a clean-up of a failed attempt on every node.
 */
export class LockAttempts implements Acquirer<LockRequest> {
  constructor(
    private readonly context: EngineContext,
    private readonly owner: LockOwner,
  ) {}

  async attempt(request: LockRequest): Promise<Grant | Refusal> {
    const { context } = this;
    checkCanAttempt(context, request);
    const { ttl, keys } = request;
    const value = leaseValue();
    const start = performance.now();
    const validUntil = start + ttl - request.drift;
    const { fencing, fenceCounterTtl } = context.options;
    nameWaiter(context, request, value);
    // A call that may wait joins the waiters' line from its first attempt: refused, it waits for
    // the release that names it, instead of asking every node again just to take its place. A
    // single attempt (tryAcquire) never joins (a lease of 0), and leaves the line's arguments out.
    // Text, as the scripts read them: converted here once, not once per node.
    const args: string[] = [
      value,
      String(ttl),
      String(keys.length),
      fencing ? '1' : '0',
      // A fence counter created now starts above every token issued before it (see lua-scripts.ts).
      fenceSeed(context.options),
      String(fenceCounterTtl),
    ];
    const joinsLine = request.lineLease > 0;
    if (joinsLine) args.push(request.waiter, String(request.arrival), String(request.lineLease));
    const sent: Promise<AcquireReply>[] = [];
    const round = await quorumRound(
      context.nodes,
      (node, i) => {
        // Just reconnected: whether the node restarted is being read (one INFO round trip).
        const checking = context.pending(i);
        return (sent[i] = checking
          ? checking.then(() => this.send(node, i, request, args))
          : this.send(node, i, request, args));
      },
      // The tokens are checked as each reply comes in, not in a step of its own per node.
      fencing ? (reply) => isGrantedWithTokens(reply, keys.length) : isGranted,
      context.quorum,
      request.nodeTimeout,
    );
    if (round.yes >= context.quorum) {
      let tokens: number[] | undefined;
      try {
        const settled = fencing ? this.settle(round, request, value, validUntil) : [];
        tokens = settled instanceof Promise ? await settled : settled;
      } catch (error) {
        this.cleanUp(keys, value, round, sent);
        throw error;
      }
      if (tokens && performance.now() < validUntil) {
        const lock = new Lock(this.owner, request.resources, keys, value, tokens, ttl, validUntil);
        if (joinsLine && !request.inLine) this.leaveWhereRefused(request, round, sent);
        return { lock, round };
      }
    }
    this.cleanUp(keys, value, round, sent);
    // Free but for an earlier waiter in line (a node grants one that arrived before every waiter
    // there, in line or not): asking again at once would be refused the same; it waits for a
    // release, which names it once it is first.
    const refusal = refusalOf(context, round, request, waitOf);
    if (joinsLine && (refusal.busy || round.no > 0)) request.inLine = true;
    return refusal;
  }

  /** ACQUIRE on node `i`; a grant of a node whose grants do not count now fails that node's part. */
  private send(
    node: LockNode,
    i: number,
    request: LockRequest,
    args: readonly (string | number)[],
  ): Promise<AcquireReply> {
    const { context } = this;
    // A node that counts the tokens of all resources gets its counter after the lock keys.
    const sent = node.run(
      ACQUIRE,
      context.countsForAll(node) ? request.acquireKeys : request.keys,
      args,
    ) as Promise<AcquireReply>;
    const excluded = context.excluded(i);
    return excluded === undefined ? sent : sent.then((reply) => uncounted(reply, excluded));
  }

  /**
   * After a grant in the first attempt that joined the lines: a node that
   * refused it (now, or in a reply that came after the round) put the waiter
   * in its line, and the waiter leaves it. A place left there would rank
   * ahead of every later waiter on that node until it expired (850 ms with
   * the default retry policy): a free lock that nobody may take, since that
   * waiter never asks again.
   */
  private leaveWhereRefused(
    request: LockRequest,
    round: RoundResult<AcquireReply>,
    sent: readonly Promise<AcquireReply>[],
  ): void {
    this.context.nodes.forEach((node, i) =>
      whenAnswered(round, sent, i, (reply) => {
        if (reply?.[0] !== 0) return;
        for (const key of request.keys)
          node.client.hdel(`${key}:q`, request.waiter).catch(() => undefined);
      }),
    );
  }

  /** Leaves the lines on every node but those that granted (a grant took the waiter out there). */
  leaveLines(request: LockRequest): void {
    const granting = request.granting?.replies as (AcquireReply | undefined)[] | undefined;
    this.context.nodes.forEach((node, i) => {
      if (granting?.[i]?.[0] === 1) return;
      for (const key of request.keys)
        node.client.hdel(`${key}:q`, request.waiter).catch(() => undefined);
    });
  }

  private settle(
    round: Awaited<ReturnType<typeof quorumRound<AcquireReply>>>,
    request: LockRequest,
    value: string,
    validUntil: number,
  ) {
    const { context } = this;
    const granting: number[] = [];
    round.replies.forEach((reply, i) => {
      if (reply?.[0] === 1) granting.push(i);
    });
    return settleTokens(
      context,
      {
        round,
        granting,
        count: request.keys.length,
        tokenOf: (reply, r) => reply[r + 1],
        overflow: (r) => ({
          resource: request.resources[r],
          counters: `${request.keys[r]}:fence and ${context.nodeCounterKey}`,
        }),
      },
      validUntil,
      request.nodeTimeout,
      (node, tokens) => {
        // KEYS: the lock keys, then each one's counter (the node's own, or the resource's).
        const all = context.countsForAll(node);
        const counters = request.keys.map((key) => (all ? context.nodeCounterKey : `${key}:fence`));
        return node.run(
          FENCE_WRITEBACK,
          [...request.keys, ...counters],
          [value, all ? 0 : context.options.fenceCounterTtl, ...tokens],
        );
      },
    );
  }

  /**
   * Best-effort release of a failed attempt on every node that may hold it: those that granted or
   * failed at once, and those the round did not wait for once their reply comes, unless it is a
   * refusal. A node that refused set nothing under this attempt's value, so a refused attempt
   * (the usual one while waiting) sends nothing there.
   */
  private cleanUp(
    keys: readonly string[],
    value: string,
    round: RoundResult<AcquireReply>,
    sent: readonly Promise<AcquireReply>[],
  ): void {
    const { context } = this;
    context.nodes.forEach((node, i) =>
      whenAnswered(round, sent, i, (reply) => {
        if (reply?.[0] === 0) return;
        node.run(RELEASE, keys, [value, context.notify, context.sender]).catch(() => undefined);
      }),
    );
  }
}

/**
 * Calls `act` with node i's reply to an attempt (undefined where the node
 * failed): at once when the round had it, else when it comes. A node the
 * round did not wait for may still grant, or refuse and so take a place in
 * its line; what to undo there is known only from that late reply.
 */
function whenAnswered(
  round: RoundResult<AcquireReply>,
  sent: readonly Promise<AcquireReply>[],
  i: number,
  act: (reply: AcquireReply | undefined) => void,
): void {
  if (round.replies[i] !== undefined || round.errors[i] !== undefined) act(round.replies[i]);
  else sent[i].then(act, () => act(undefined));
}
