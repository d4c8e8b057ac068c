import {
  judgeInspection,
  normalizeResources,
  type LockHealth,
  type LockInspection,
  type NodeLockState,
} from '../engine/internal.js';
import { wakeFor } from './memory-line.js';
import { fenceOn, holderOn, leaseLeft, lockKey, resourceOf } from './memory-nodes.js';
import type { MemoryState } from './memory-state.js';

/**
 * The in-memory engine's administration (inspect, list, forceRelease,
 * reseedFences, health), read from and done on the simulated nodes as the
 * real engine does it on Redis.
 */

/** What every simulated node holds for `resource`, judged as the real engine judges it. */
export function inspectNodes(state: MemoryState, resource: string): LockInspection {
  const key = lockKey(state.options, normalizeResources(resource)[0]!);
  const now = performance.now();
  const nodes = state.nodes.map((node): NodeLockState => {
    if (node.down)
      return {
        node: node.label,
        holder: undefined,
        ttl: undefined,
        fence: undefined,
        error: node.down.message,
      };
    const entry = node.keys.get(key);
    const live = entry && entry.expiresAt > now ? entry : undefined;
    return {
      node: node.label,
      holder: live?.value ?? null,
      ttl: live ? leaseLeft(live.expiresAt, now) : -2,
      fence: fenceOn(node, key) ?? null,
    };
  });
  return judgeInspection(normalizeResources(resource)[0]!, nodes, state.quorum);
}

/** Locked resources whose name matches `pattern` (a Redis glob), sorted, at most `limit`. */
export function listHeld(state: MemoryState, pattern: string, limit: number): string[] {
  const match = globToRegExp(pattern);
  const now = performance.now();
  const seen = new Map<string, number>();
  const answering = state.nodes.filter((node) => !node.down);
  for (const node of answering) {
    for (const [key, entry] of node.keys) {
      if (entry.expiresAt <= now) continue;
      const resource = resourceOf(state.options, key);
      if (match.test(resource)) seen.set(resource, (seen.get(resource) ?? 0) + 1);
    }
  }
  // As the real engine counts: a quorum, or as many as a held lock can show with nodes silent.
  const needed = Math.max(1, state.quorum - (state.nodes.length - answering.length));
  return [...seen]
    .filter(([, count]) => count >= needed)
    .map(([resource]) => resource)
    .sort()
    .slice(0, limit);
}

/** Deletes a lock on every answering node and wakes its waiters; returns how many nodes had it. */
export function deleteEverywhere(state: MemoryState, resource: string): number {
  const key = lockKey(state.options, normalizeResources(resource)[0]!);
  const now = performance.now();
  let had = 0;
  for (const node of state.nodes) {
    if (node.down) continue;
    if (holderOn(node, key, now) !== undefined) had++;
    node.keys.delete(key);
  }
  state.locks.delete(key);
  wakeFor(state.line, [key]);
  return had;
}

/** Raises every fence counter matching `pattern` to the highest value any node has for it. */
export function raiseFences(state: MemoryState, pattern: string): Record<string, number> {
  const match = globToRegExp(pattern);
  const highest = new Map<string, number>();
  for (const node of state.nodes)
    for (const [counter, value] of node.fences) {
      const resource = counter === '' ? '' : resourceOf(state.options, counter);
      if (counter === '' || match.test(resource))
        highest.set(counter, Math.max(highest.get(counter) ?? 0, value));
    }
  const raised: Record<string, number> = {};
  for (const node of state.nodes) {
    raised[node.label] = 0;
    if (node.down) continue;
    for (const [counter, value] of highest) {
      if ((node.fences.get(counter) ?? 0) < value) {
        node.fences.set(counter, value);
        raised[node.label]++;
      }
    }
  }
  return raised;
}

/** Every node up unless failed by the test; latency 0. */
export function nodeHealth(state: MemoryState): LockHealth {
  const nodes = state.nodes.map((node) => ({
    node: node.label,
    up: !node.down,
    latency: node.down ? undefined : 0,
    error: node.down?.message,
  }));
  return {
    quorum: nodes.filter((n) => n.up).length >= state.quorum,
    required: state.quorum,
    nodes,
  };
}

/**
 * A Redis glob (`*`, `?`, `[...]`, `\` escapes) as a regular expression. (The
 * real engine hands its globs to SCAN MATCH; here they are matched in memory.)
 */
function globToRegExp(pattern: string): RegExp {
  let source = '';
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]!;
    if (c === '\\' && i + 1 < pattern.length) source += escapeRegExp(pattern[++i]!);
    else if (c === '*') source += '.*';
    else if (c === '?') source += '.';
    else if (c === '[') {
      const end = pattern.indexOf(']', i + 1);
      if (end < 0) source += '\\[';
      else {
        const body = pattern.slice(i + 1, end);
        source += `[${body.startsWith('^') ? `^${body.slice(1)}` : body}]`;
        i = end;
      }
    } else source += escapeRegExp(c);
  }
  return new RegExp(`^${source}$`, 's');
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&');
}
