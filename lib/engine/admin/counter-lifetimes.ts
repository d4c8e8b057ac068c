import type { LockNode } from '../lock-node.js';
import { bounded } from '../time-bound.js';
import { fenceKeyPattern, scanKeys } from './key-scan.js';

/** How many fence counters per node the sample reads. */
const SAMPLE_SIZE = 20;

/** Which nodes have fence counters that never expire, and which have counters that do. */
export interface CounterLifetimes {
  /** Labels of the nodes with a counter without expiry (fenceCounterTtl 0), in node order. */
  readonly forever: readonly string[];
  /** Labels of the nodes with a counter that expires, in node order. */
  readonly expiring: readonly string[];
}

/**
 * Reads the lifetimes of a few fence counters (of the resources matching
 * `pattern`) on every connected node, each read bounded by `timeoutMs`. A
 * node that is not connected, or fails, is left out: this is a sample.
 */
export async function sampleCounterLifetimes(
  nodes: readonly LockNode[],
  keyPrefix: string,
  pattern: string,
  timeoutMs: number,
): Promise<CounterLifetimes> {
  const match = fenceKeyPattern(keyPrefix, pattern);
  const forever = new Set<string>();
  const expiring = new Set<string>();
  await Promise.allSettled(
    nodes.map(async (node) => {
      if (node.client.status !== 'ready') return;
      const sample: string[] = [];
      for await (const key of scanKeys(node.client, match, timeoutMs)) {
        sample.push(key);
        if (sample.length >= SAMPLE_SIZE) break;
      }
      for (const key of sample) {
        const ttl = await bounded(node.client.pttl(key), timeoutMs);
        if (ttl === -1) forever.add(node.label);
        else if (ttl >= 0) expiring.add(node.label);
      }
    }),
  );
  const inOrder = (found: Set<string>) =>
    nodes.map((node) => node.label).filter((label) => found.has(label));
  return { forever: inOrder(forever), expiring: inOrder(expiring) };
}

/**
 * Where counters raised with the lifetime `ttl` (ms, 0: none) would not match
 * the counters on the nodes. would-lapse: the nodes' counters never expire
 * (the app runs with fenceCounterTtl 0), so raised with a lifetime they would
 * lapse and count from 1 again: refuse. kept-forever: the nodes' counters
 * expire but `ttl` is 0: safe, but the raised ones are never cleaned up.
 */
export type CounterLifetimeMismatch =
  | { readonly kind: 'would-lapse'; readonly nodes: readonly string[] }
  | { readonly kind: 'kept-forever'; readonly nodes: readonly string[] };

/** The mismatch between the sampled lifetimes and `ttl`, or undefined when they agree. */
export function compareCounterLifetimes(
  sample: CounterLifetimes,
  ttl: number,
): CounterLifetimeMismatch | undefined {
  if (ttl > 0 && sample.forever.length > 0) return { kind: 'would-lapse', nodes: sample.forever };
  if (ttl === 0 && sample.expiring.length > 0 && sample.forever.length === 0) {
    return { kind: 'kept-forever', nodes: sample.expiring };
  }
  return undefined;
}
