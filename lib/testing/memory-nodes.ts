import { randomBytes } from 'node:crypto';
import {
  LockOptionsError,
  type LockNodeSpec,
  type NodeFailure,
  type NodeResults,
  type ResolvedEngineOptions,
} from '../engine/internal.js';
import type { MemoryNode, MemoryState } from './memory-state.js';

/**
 * The in-memory engine's simulated nodes: what each holds (lock keys with
 * their expiry, fence counters), rounds over them as the real engine runs
 * them over Redis, and their names.
 */

/** The answers of a round over the nodes. */
export interface Round {
  readonly yes: number;
  readonly no: number;
  readonly failed: number;
  readonly failures: NodeFailure[];
}

/** How every node answered one attempt to take keys. */
export interface Vote {
  /** The nodes where every key is free (and no earlier caller waits for them). */
  readonly granting: MemoryNode[];
  /** Per refusing node: the longest lease left on the keys, in ms; -3 for "an earlier caller waits". */
  readonly leases: number[];
  readonly failures: NodeFailure[];
}

/** The node specs to simulate: `count` of them named `memory-<n>`, or the list given. */
export function nodeSpecs(nodes: number | readonly LockNodeSpec[]): readonly LockNodeSpec[] {
  const count = typeof nodes === 'number' ? nodes : nodes.length;
  if (!Number.isInteger(count) || count < 1) {
    throw new LockOptionsError(
      `nodes must be a number of simulated nodes from 1, or a non-empty list of node specs (got ${String(nodes)}).`,
    );
  }
  return typeof nodes === 'number'
    ? Array.from({ length: count }, (_, i) => `redis://memory-${i + 1}:6379`)
    : nodes;
}

/** One empty, answering node per spec; `numbered`: named `memory-<n>` rather than after its spec. */
export function simulateNodes(specs: readonly LockNodeSpec[], numbered: boolean): MemoryNode[] {
  return specs.map((spec, i) => ({
    label: numbered ? `memory-${i + 1}` : labelOf(spec, i),
    keys: new Map(),
    fences: new Map(),
    down: undefined,
  }));
}

/** What a failed node answers, in the words ioredis uses for a node that is down. */
export const nodeDown = (label: string) =>
  Object.assign(new Error(`connect ECONNREFUSED ${label} (failed by the test)`), {
    code: 'ECONNREFUSED',
  });

export function lockKey(options: ResolvedEngineOptions, resource: string): string {
  return `${options.keyPrefix}{${resource}}`;
}

/** The resource a lock key or fence counter names. */
export function resourceOf(options: ResolvedEngineOptions, key: string): string {
  return key.slice(options.keyPrefix.length + 1, -1);
}

/** How much of a lease is taken off for clock drift, as the real engine reckons it. */
export function drift(options: ResolvedEngineOptions, ttl: number): number {
  return Math.floor(ttl * options.driftFactor) + 2;
}

export function randomValue(): string {
  return randomBytes(16).toString('base64url');
}

/** Whole milliseconds left, as PTTL rounds them. */
export const leaseLeft = (expiresAt: number, now: number) =>
  Math.max(0, Math.ceil(expiresAt - now));

export const results = (round: Round): NodeResults => ({
  granted: round.yes,
  denied: round.no,
  failed: round.failed,
});

/** Asks every node for `keys`; `behindLine`: an earlier caller waits, so free nodes refuse too. */
export function vote(
  state: MemoryState,
  keys: readonly string[],
  now: number,
  behindLine: boolean,
): Vote {
  const leases: number[] = [];
  const granting: MemoryNode[] = [];
  const failures: NodeFailure[] = [];
  for (const node of state.nodes) {
    if (node.down) {
      failures.push({ node: node.label, error: node.down });
      continue;
    }
    const held = keys
      .map((key) => node.keys.get(key))
      .filter((entry) => entry !== undefined && entry.expiresAt > now);
    if (held.length > 0) leases.push(Math.max(...held.map((e) => leaseLeft(e!.expiresAt, now))));
    else if (behindLine) leases.push(-3);
    else granting.push(node);
  }
  return { granting, leases, failures };
}

/** Writes the lock on `nodes` and returns its tokens: per key, one above every node's counter. */
export function grantOnNodes(
  options: ResolvedEngineOptions,
  keys: readonly string[],
  value: string,
  ttl: number,
  now: number,
  nodes: readonly MemoryNode[],
): number[] {
  for (const node of nodes)
    for (const key of keys) node.keys.set(key, { value, expiresAt: now + ttl });
  if (!options.fencing) return [];
  const perNode = options.fenceCounter === 'node';
  return keys.map((key) => {
    const counter = perNode ? '' : key;
    let token = 0;
    for (const node of nodes) token = Math.max(token, (node.fences.get(counter) ?? 0) + 1);
    // The real engine's write-back: every granting node carries the token it settled on.
    for (const node of nodes) node.fences.set(counter, token);
    return token;
  });
}

export function fenceOn(node: MemoryNode, key: string): number | undefined {
  const own = node.fences.get(key);
  const shared = node.fences.get('');
  if (own === undefined) return shared;
  return shared === undefined ? own : Math.max(own, shared);
}

export function holderOn(node: MemoryNode, key: string, now: number): string | undefined {
  const entry = node.keys.get(key);
  return entry && entry.expiresAt > now ? entry.value : undefined;
}

export function heldOnQuorum(state: MemoryState, key: string, now: number): boolean {
  let held = 0;
  for (const node of state.nodes) if (holderOn(node, key, now) !== undefined) held++;
  return held >= state.quorum;
}

/** A round over the nodes: `apply` says whether a node that answers agreed. */
export function nodeRound(state: MemoryState, apply: (node: MemoryNode) => boolean): Round {
  let yes = 0;
  let no = 0;
  const failures: NodeFailure[] = [];
  for (const node of state.nodes) {
    if (node.down) failures.push({ node: node.label, error: node.down });
    else if (apply(node)) yes++;
    else no++;
  }
  return { yes, no, failed: failures.length, failures };
}

/** How many nodes answer. */
export function up(state: MemoryState): number {
  return state.nodes.filter((node) => !node.down).length;
}

/** A grant's results: every node that is up granted it (simulated nodes answer at once). */
export function grantResults(state: MemoryState): NodeResults {
  const granted = up(state);
  return { granted, denied: 0, failed: state.nodes.length - granted };
}

/** A node's name from its spec, as the real engine's labels read: `host:port`. */
function labelOf(spec: LockNodeSpec, index: number): string {
  if (typeof spec === 'string') {
    try {
      const url = new URL(spec);
      return `${url.hostname}:${url.port || 6379}`;
    } catch {
      return `node-${index + 1}`;
    }
  }
  return `node-${index + 1}`;
}
