import {
  checkMs,
  LockBusyError,
  LockOptionsError,
  LockUnavailableError,
  normalizeResources,
} from '../engine/internal.js';
import { wakeFor } from './memory-line.js';
import {
  grantOnNodes,
  heldOnQuorum,
  lockKey,
  nodeDown,
  randomValue,
  nodeRound,
} from './memory-nodes.js';
import type { LockGrant, MemoryState } from './memory-state.js';

/**
 * The in-memory engine's hooks for tests, done on its state: what the
 * engine's documented methods (hold, expire, failNodes, ...) run.
 */

/** A lock {@link InMemoryLockEngine.hold} put in place for another process. */
export interface ForeignHold {
  readonly resources: readonly string[];
  readonly tokens: readonly number[];
  readonly token: number | undefined;
  /** Frees it as its holder would, waking the callers waiting for it. */
  release(): void;
}

/** Another process takes `resources` now; see {@link InMemoryLockEngine.hold}. */
export function holdElsewhere(
  state: MemoryState,
  resources: string | readonly string[],
  options: { ttl?: number },
): ForeignHold {
  const list = normalizeResources(resources);
  const ttl = options.ttl === undefined ? state.options.ttl : checkMs('ttl', options.ttl, 1);
  const keys = list.map((resource) => lockKey(state.options, resource));
  const now = performance.now();
  const busy = keys.filter((key) => heldOnQuorum(state, key, now));
  if (busy.length > 0) {
    throw new LockBusyError(
      list,
      undefined,
      `hold() cannot take ${list.join(', ')}: it is held already; release or expire() it first.`,
    );
  }
  const answering = state.nodes.filter((node) => !node.down);
  if (answering.length < state.quorum) {
    const failures = nodeRound(state, () => true).failures;
    throw new LockUnavailableError(list, failures, state.quorum, state.nodes.length);
  }
  const value = `elsewhere:${randomValue()}`;
  const tokens = grantOnNodes(state.options, keys, value, ttl, now, answering);
  state.history.push({ resources: list, tokens, token: tokens[0], ttl, by: 'elsewhere', at: now });
  return {
    resources: list,
    tokens,
    token: tokens[0],
    release: () => {
      for (const node of state.nodes)
        for (const key of keys) if (node.keys.get(key)?.value === value) node.keys.delete(key);
      wakeFor(state.line, keys);
    },
  };
}

/** The lease of `resource` ends now; see {@link InMemoryLockEngine.expire}. */
export function expireLease(state: MemoryState, resource: string): void {
  const key = lockKey(state.options, normalizeResources(resource)[0]!);
  for (const node of state.nodes) node.keys.delete(key);
  const lock = state.locks.get(key);
  state.locks.delete(key);
  lock?.lost('its lease ran out (ended by the test)');
  wakeFor(state.line, [key]);
}

/** Fails (`down`) or restores the nodes at these indexes, all of them when none is given. */
export function setNodesDown(state: MemoryState, indexes: readonly number[], down: boolean): void {
  for (const i of checkedIndexes(state, indexes)) {
    const node = state.nodes[i]!;
    node.down = down ? nodeDown(node.label) : undefined;
  }
}

/** Every grant so far, oldest first; those of `resource` when it is given. */
export function grantsOf(state: MemoryState, resource?: string): readonly LockGrant[] {
  return resource === undefined
    ? [...state.history]
    : state.history.filter((grant) => grant.resources.includes(resource));
}

/** True while a quorum of the nodes holds `resource` for someone (this engine or not). */
export function lockedOnQuorum(state: MemoryState, resource: string): boolean {
  return heldOnQuorum(
    state,
    lockKey(state.options, normalizeResources(resource)[0]!),
    performance.now(),
  );
}

/** No locks, grants or fence counters, every node up, and open again; waiters stay. */
export function resetState(state: MemoryState): void {
  for (const node of state.nodes) {
    node.keys.clear();
    node.fences.clear();
    node.down = undefined;
  }
  state.locks.clear();
  state.leases.clear();
  state.leaseFences.clear();
  state.history.length = 0;
  state.closed = false;
}

function checkedIndexes(state: MemoryState, indexes: readonly number[]): number[] {
  const count = state.nodes.length;
  if (indexes.length === 0) return state.nodes.map((_, i) => i);
  for (const i of indexes) {
    if (!Number.isInteger(i) || i < 0 || i >= count) {
      throw new LockOptionsError(
        `There is no node ${i}: the engine simulates ${count} (indexes 0 to ${count - 1}).`,
      );
    }
  }
  return [...indexes];
}
