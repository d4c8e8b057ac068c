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

async function offsetOf(node: LockNode, timeoutMs: number): Promise<number | undefined> {
  const sent = performance.now();
  try {
    const reply = await bounded(node.client.time(), timeoutMs);
    const received = performance.now();
    const nodeMs = Number(reply[0]) * 1000 + Number(reply[1]) / 1000;
    // The node read its clock about halfway through the round trip.
    const local = performance.timeOrigin + (sent + received) / 2;
    return Number.isFinite(nodeMs) ? nodeMs - local : undefined;
  } catch {
    // TIME may be denied by an ACL, or not answered in time: this process's clock then ranks
    // its waiters.
    return undefined;
  }
}
