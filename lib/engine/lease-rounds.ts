import type { EngineContext } from './engine-context.js';
import type { Lock, ReleaseResult } from './lock.js';
import { LockLostError, LockUnavailableError } from './lock-errors.js';
import type { LockNode } from './lock-node.js';
import { checkMs } from './option-checks.js';
import { quorumRound, roundFailures } from './quorum-round.js';

const isOne = (reply: unknown) => reply === 1;
const isPositive = (reply: unknown) => typeof reply === 'number' && reply > 0;

/**
 * Renews a lease on every node where it still stands (`call` sends one
 * node's extension), counted only when a quorum succeeds before the current
 * validity ends. Throws LockLostError when the lease is gone (and aborts the
 * lock's signal), or LockUnavailableError when too few nodes answered (the
 * lock stays valid until its current validity ends, or sooner: see below).
 */
export async function extendLease(
  context: EngineContext,
  lock: Lock,
  ttl: number | undefined,
  timeout: number | undefined,
  call: (node: LockNode, ttl: number) => Promise<unknown>,
): Promise<Lock> {
  if (ttl === undefined) ttl = lock.ttl;
  else if (ttl !== lock.ttl) checkMs('ttl', ttl, 10);
  context.noteTtl(ttl);
  if (lock.isReleased) throw new LockLostError(lock.resources, 'it was already released');
  const start = performance.now();
  const left = lock.validUntil - start;
  if (left <= 0) {
    lock.lost('its lease ran out before the extension');
    throw new LockLostError(lock.resources, 'its lease ran out before the extension');
  }
  const { nodes, quorum } = context;
  const leaseTtl = ttl;
  const round = await quorumRound(
    nodes,
    (node) => call(node, leaseTtl),
    isOne,
    quorum,
    Math.min(timeout ?? context.nodeTimeout(ttl), left),
  );
  const renewed = start + ttl - context.drift(ttl);
  if (round.yes >= quorum && performance.now() < lock.validUntil) {
    lock.renewed(renewed);
    context.extended(lock, start, round, leaseTtl);
    return lock;
  }
  // The new lease may have been set on nodes whose answer came too late or never: a shorter
  // one than before then ends sooner than the validity the lock still counts on.
  if (renewed < lock.validUntil) lock.renewed(renewed);
  if (round.no > nodes.length - quorum) lostOnNodes(lock);
  throw new LockUnavailableError(
    lock.resources,
    roundFailures(nodes, round.errors),
    quorum,
    nodes.length,
    'extend',
  );
}

/**
 * Deletes a lease on every node that still holds it (`call` sends one node's
 * release), and wakes at most `wakes` of this process's waiters for it (the
 * earliest). A holder that was paused past its lease learns here that it lost it.
 */
export async function releaseLease(
  context: EngineContext,
  lock: Lock,
  call: (node: LockNode) => Promise<unknown>,
  wakes = Infinity,
): Promise<ReleaseResult> {
  const start = performance.now();
  if (lock.validUntil <= start) lock.lost('its lease ran out before it was released');
  lock.released();
  const { nodes, quorum } = context;
  const releasing = quorumRound(nodes, call, isPositive, quorum, context.nodeTimeout(lock.ttl));
  // This process's own waiters need no message from the nodes (the channel skips this engine's
  // own), nor the release's answers: their attempt goes out on the same connections after the
  // release, so each node runs it after the release (a round trip sooner than waiting).
  for (const key of lock.keys) context.queues.released(key, '', wakes);
  const round = await releasing;
  const result: ReleaseResult = {
    released: round.yes >= quorum,
    nodesReleased: round.yes,
    nodesNotHeld: round.no,
    nodesPending: nodes.length - round.yes - round.no - round.failed,
    failures: roundFailures(nodes, round.errors),
  };
  // Only now: a close() waiting for this lock must not close the connections under its release.
  context.released(lock, result, start, round);
  return result;
}

/** Too many nodes no longer hold the lock: it is lost, and the extension that found out throws. */
export function lostOnNodes(lock: Lock): never {
  const why =
    'the nodes no longer hold it (it expired, was taken over, or was force-released by an operator)';
  lock.lost(why);
  throw new LockLostError(lock.resources, why);
}
