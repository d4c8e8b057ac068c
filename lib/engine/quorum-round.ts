import type { LockNode } from './lock-node.js';
import type { NodeFailure } from './lock-errors.js';
import { answerTimeout } from './time-bound.js';

/** What one parallel request to every node came back with. */
export interface RoundResult<T> {
  /** Reply per node; `undefined` where the node failed or did not answer in time. */
  readonly replies: (T | undefined)[];
  /** Error per node, where it failed. */
  readonly errors: (Error | undefined)[];
  /** Nodes that said yes (granted, extended, released). */
  yes: number;
  /** Nodes that answered no. */
  no: number;
  /** Nodes that failed or did not answer in time. */
  failed: number;
}

/**
 * Sends one request to every node in parallel and settles as soon as the
 * outcome is decided: `quorum` yeses, too many noes (or noes and failures)
 * for a quorum, every node answered, or `timeoutMs` passed (one timer for the whole round,
 * so a hung node costs at most that). Late replies are dropped; the callers
 * clean up after them by releasing on every node.
 *
 * `isYes` may throw instead (a reply that must not count, say): the node
 * then counts as failed, with that error, and its reply is not kept.
 *
 * With `slotOf`, the yeses must also agree (a semaphore's nodes each grant a
 * permit slot): the quorum is of yeses for one slot, and the round also
 * settles once no slot can reach it, counting the nodes still pending.
 */
export function quorumRound<T>(
  nodes: readonly LockNode[],
  send: (node: LockNode, index: number) => Promise<T>,
  isYes: (reply: T) => boolean,
  quorum: number,
  timeoutMs: number,
  slotOf?: (reply: T) => unknown,
): Promise<RoundResult<T>> {
  const count = nodes.length;
  /** Yeses per slot, and the most for one slot (all the yeses when slots do not matter). */
  const perSlot = slotOf && new Map<unknown, number>();
  let best = 0;
  const result: RoundResult<T> = {
    replies: new Array<T | undefined>(count),
    errors: new Array<Error | undefined>(count),
    yes: 0,
    no: 0,
    failed: 0,
  };
  return new Promise((resolve) => {
    let settled = false;
    const finish = () => {
      settled = true;
      clearTimeout(timer);
      resolve(result);
    };
    const decided = () => {
      const pending = count - result.yes - result.no - result.failed;
      if (
        best >= quorum ||
        // Out of reach, and a node said no (a holder, a lost lock) or granted another slot: that
        // is the answer. Out of reach through failures alone is an outage: the round waits for
        // every node (within its timeout) so that the error reports each one's outcome.
        (best + pending < quorum && (result.no > 0 || result.yes > best)) ||
        pending === 0
      ) {
        finish();
      }
    };
    let timer: NodeJS.Timeout | undefined;
    const expire = () => {
      if (settled) return;
      for (let i = 0; i < count; i++) {
        if (result.replies[i] === undefined && result.errors[i] === undefined) {
          result.errors[i] = new Error(`no answer within ${Math.round(timeoutMs)} ms`);
          result.failed++;
        }
      }
      finish();
    };
    const failed = (i: number, error: unknown) => {
      result.errors[i] = error instanceof Error ? error : new Error(String(error));
      result.failed++;
      decided();
    };
    for (let i = 0; i < count; i++) {
      send(nodes[i], i).then(
        (reply) => {
          if (settled) return;
          let yes: boolean;
          try {
            yes = isYes(reply);
          } catch (error) {
            failed(i, error);
            return;
          }
          result.replies[i] = reply;
          if (!yes) result.no++;
          else if (!perSlot) best = ++result.yes;
          else {
            result.yes++;
            const slot = slotOf!(reply);
            const votes = (perSlot.get(slot) ?? 0) + 1;
            perSlot.set(slot, votes);
            if (votes > best) best = votes;
          }
          decided();
        },
        (error: unknown) => {
          if (!settled) failed(i, error);
        },
      );
    }
    // The nodes' commands leave by the end of this turn of the event loop (LockNode.run). The
    // clock starts once they have: armed now, a loop blocked past the timeout would fire the
    // timer before anything was sent, and the round would fail with every node healthy.
    setImmediate(() => {
      if (!settled) timer = answerTimeout(expire, timeoutMs);
    });
  });
}

/** The failures of a round, labelled with their nodes, for error messages. */
export function roundFailures(
  nodes: readonly LockNode[],
  errors: readonly (Error | undefined)[],
): NodeFailure[] {
  const failures: NodeFailure[] = [];
  for (let i = 0; i < nodes.length; i++) {
    const error = errors[i];
    if (error) failures.push({ node: nodes[i].label, error });
  }
  return failures;
}
