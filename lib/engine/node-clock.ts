import type { LockNode } from './lock-node.js';
import { bounded } from './time-bound.js';

/**
 * How far the nodes' clocks are ahead of this process's (ms, the median over
 * the nodes that answered TIME in time; 0 when none did). Waiters rank each
 * other by when they began to wait; read on this process's clock plus this
 * offset, that moment is comparable between processes whose own clocks
 * disagree, as long as the Redis hosts agree with each other.
 */
export async function nodeClockOffset(
  nodes: readonly LockNode[],
  ready: readonly boolean[],
  timeoutMs: number,
): Promise<number> {
  const offsets = await Promise.all(
    nodes.map((node, i) => (ready[i] ? offsetOf(node, timeoutMs) : undefined)),
  );
  const known = offsets.filter((offset): offset is number => offset !== undefined);
  if (known.length === 0) return 0;
  known.sort((a, b) => a - b);
  const middle = known.length >> 1;
  return known.length % 2 === 1 ? known[middle] : (known[middle - 1] + known[middle]) / 2;
}

/** TIME round trips per node on connect; the quickest one sets the offset. */
const SAMPLES = 5;

/**
 * The node's clock minus this process's, from the quickest of a few TIME
 * round trips: the node read its clock somewhere within the round trip, so
 * the estimate is off by at most half of it, and a round trip slowed by a
 * busy event loop or network would skew it by as much.
 */
async function offsetOf(node: LockNode, timeoutMs: number): Promise<number | undefined> {
  let best: { rtt: number; offset: number } | undefined;
  for (let i = 0; i < SAMPLES; i++) {
    const sent = performance.now();
    try {
      const reply = await bounded(node.client.time(), timeoutMs);
      const received = performance.now();
      const nodeMs = Number(reply[0]) * 1000 + Number(reply[1]) / 1000;
      if (!Number.isFinite(nodeMs)) return best?.offset;
      // The node read its clock about halfway through the round trip.
      const offset = nodeMs - (performance.timeOrigin + (sent + received) / 2);
      if (!best || received - sent < best.rtt) best = { rtt: received - sent, offset };
    } catch {
      // TIME may be denied by an ACL, or not answered in time: the samples so far rank this
      // process's waiters, or with none its own clock does.
      return best?.offset;
    }
  }
  return best?.offset;
}
