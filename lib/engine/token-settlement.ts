import type { EngineContext } from './engine-context.js';
import { LockConfigurationError } from './lock-errors.js';
import type { LockNode } from './lock-node.js';
import { quorumRound, type RoundResult } from './quorum-round.js';

/** A grant's fencing tokens, read from the granting nodes' replies. */
export interface TokenReplies<T> {
  readonly round: RoundResult<T>;
  /** The nodes (indices) whose grant counts. */
  readonly granting: readonly number[];
  /** Tokens per grant: one per locked resource. */
  readonly count: number;
  /** Token `r` of a granting node's reply. */
  tokenOf(reply: T, r: number): number;
  /** For the message of a counter past 2^53: resource `r`, and the counters to delete. */
  overflow(r: number): { readonly resource: string; readonly counters: string };
}

const isOne = (reply: unknown) => reply === 1;

/**
 * The fencing tokens of a grant: per resource the highest counter among the
 * granting nodes. Final at once when they agree; otherwise written back (by
 * `writeBack`) to the nodes that returned less, only where the grant still
 * stands, and final only if a quorum then carries them. Undefined when that
 * fails. A promise only when a second round has to run: no await on the usual path.
 */
export function settleTokens<T>(
  context: EngineContext,
  replies: TokenReplies<T>,
  validUntil: number,
  nodeTimeout: number,
  writeBack: (node: LockNode, tokens: readonly number[]) => Promise<unknown>,
): number[] | undefined | Promise<number[] | undefined> {
  const { round, granting, count, tokenOf } = replies;
  const tokens = new Array<number>(count).fill(0);
  for (const i of granting) {
    const reply = round.replies[i]!;
    for (let r = 0; r < count; r++) tokens[r] = Math.max(tokens[r], tokenOf(reply, r));
  }
  const overflow = tokens.findIndex((token) => !Number.isSafeInteger(token));
  if (overflow >= 0) {
    const { resource, counters } = replies.overflow(overflow);
    throw new LockConfigurationError(
      `The fence counter of '${resource}' passed 2^53 - 1, beyond what a JavaScript number holds exactly. ` +
        `Delete ${counters} on every node (with fenceCounterTtl set, a new counter starts from the clock), ` +
        'or lock under another keyPrefix.',
    );
  }
  const behind: LockNode[] = [];
  for (const i of granting) {
    const reply = round.replies[i]!;
    for (let r = 0; r < count; r++) {
      if (tokenOf(reply, r) === tokens[r]) continue;
      behind.push(context.nodes[i]);
      break;
    }
  }
  if (behind.length === 0) return tokens;
  const needed = context.quorum - (granting.length - behind.length);
  const left = validUntil - performance.now();
  if (needed <= 0) return tokens;
  if (left <= 0 || behind.length < needed) return undefined;
  return quorumRound(
    behind,
    (node) => writeBack(node, tokens),
    isOne,
    needed,
    Math.min(nodeTimeout, left),
  ).then((round) => (round.yes >= needed ? tokens : undefined));
}
