/**
 * The in-memory engine's plain lock on its simulated nodes: an attempt, an
 * extension and a release, each a round over every node that answers. The
 * engine turns the rounds into its results, events and errors.
 */
import { Lock, LockUnavailableError, type LockOwner } from '../engine/internal.js';
import type { MemoryRefusal, MemoryRequest } from './memory-acquire.js';
import { someoneAhead, wakeFor } from './memory-line.js';
import {
  grantOnNodes,
  holderOn,
  nodeRound,
  randomValue,
  results,
  vote,
  type Round,
} from './memory-nodes.js';
import type { MemoryState } from './memory-state.js';

/**
 * A vote of every node that answers: the lock with its tokens when a quorum
 * grants it (recorded in the state's locks and history), else the real
 * engine's verdict, busy or unavailable.
 */
export function attemptLock(
  state: MemoryState,
  owner: LockOwner,
  request: MemoryRequest,
): Lock | MemoryRefusal {
  const now = performance.now();
  const value = randomValue();
  // First come, first served: an earlier caller waiting for any of these resources goes first.
  const behindLine = someoneAhead(state.line, request);
  const { granting, leases, failures } = vote(state, request.keys, now, behindLine);
  if (granting.length >= state.quorum) {
    const validUntil = now + request.ttl - request.drift;
    const tokens = grantOnNodes(state.options, request.keys, value, request.ttl, now, granting);
    const lock = new Lock(
      owner,
      request.resources,
      request.keys,
      value,
      tokens,
      request.ttl,
      validUntil,
    );
    for (const key of request.keys) state.locks.set(key, lock);
    state.history.push({
      resources: request.resources,
      tokens,
      token: tokens[0],
      ttl: request.ttl,
      by: 'engine',
      at: now,
    });
    return lock;
  }
  const round = {
    yes: granting.length,
    no: leases.length,
    failed: failures.length,
    failures,
  };
  const error = () =>
    new LockUnavailableError(request.resources, failures, state.quorum, state.nodes.length);
  // The real engine's verdict: unavailable when too many nodes failed for a quorum or when
  // nobody denied; otherwise busy, free at the latest when enough holders' leases have ended.
  if (round.failed > state.nodes.length - state.quorum || round.no === 0)
    return { busy: false, retryAfter: undefined, behindLine, error, nodes: results(round) };
  leases.sort((a, b) => a - b);
  const lease = leases[Math.min(Math.max(0, state.quorum - round.yes - 1), leases.length - 1)];
  return {
    busy: true,
    retryAfter: lease !== undefined && lease >= 0 ? lease : undefined,
    behindLine,
    error,
    nodes: results(round),
  };
}

/** Renews the lease on every node that still holds the lock. */
export function extendOnNodes(state: MemoryState, lock: Lock, start: number, ttl: number): Round {
  return nodeRound(state, (node) => {
    if (!lock.keys.every((key) => holderOn(node, key, start) === lock.value)) return false;
    for (const key of lock.keys) node.keys.set(key, { value: lock.value, expiresAt: start + ttl });
    return true;
  });
}

/** Deletes the lock on every node that still holds it, and wakes its waiters. */
export function releaseOnNodes(state: MemoryState, lock: Lock, start: number): Round {
  const round = nodeRound(state, (node) => {
    if (!lock.keys.every((key) => holderOn(node, key, start) === lock.value)) return false;
    for (const key of lock.keys) node.keys.delete(key);
    return true;
  });
  for (const key of lock.keys) if (state.locks.get(key) === lock) state.locks.delete(key);
  wakeFor(state.line, lock.keys);
  return round;
}
