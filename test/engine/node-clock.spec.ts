/**
 * The nodes' clock offset (lib/engine/node-clock.ts), without Redis: nodes
 * whose TIME replies come back at chosen moments, so that the estimate's
 * error is known.
 */
import { describe, expect, it } from '@jest/globals';
import type { LockNode } from '../../lib/engine/lock-node.js';
import { nodeClockOffset } from '../../lib/engine/node-clock.js';

/** The node's clock is this far ahead of this process's. */
const AHEAD = 5_000;

/**
 * A node that reads its clock as soon as TIME arrives, then holds each reply
 * back for the next of `delays` (ms): a reply held back is an asymmetric round
 * trip, which skews an estimate taken from it by half the delay.
 */
function node(delays: number[]): LockNode {
  const time = () => {
    const now = performance.timeOrigin + performance.now() + AHEAD;
    const reply = [String(Math.floor(now / 1000)), String(Math.round((now % 1000) * 1000))];
    const delay = delays.shift() ?? 0;
    return new Promise<string[]>((resolve) => setTimeout(() => resolve(reply), delay).unref());
  };
  return { client: { time } } as unknown as LockNode;
}

/** A node that refuses TIME (an ACL without it). */
const refusing = {
  client: {
    time: () =>
      Promise.reject(new Error("NOPERM this user has no permissions to run the 'time' command")),
  },
} as unknown as LockNode;

describe("the nodes' clock offset", () => {
  it('comes from the quickest round trip, not from one a slow reply skewed', async () => {
    // Every round trip but the last is held back 200 ms: taken alone, each would put the
    // offset 100 ms too low.
    const offset = await nodeClockOffset([node([200, 200, 200, 200, 0])], [true], 5_000);
    expect(Math.abs(offset - AHEAD)).toBeLessThan(50);
  });

  it('is the median over the nodes, skipping those not ready or refusing TIME', async () => {
    const offset = await nodeClockOffset(
      [node([]), refusing, node([]), node([])],
      [true, true, true, false],
      5_000,
    );
    expect(Math.abs(offset - AHEAD)).toBeLessThan(50);
    expect(await nodeClockOffset([refusing], [true], 5_000)).toBe(0);
  });

  it('keeps the samples it has when a node stops answering in time', async () => {
    const started = performance.now();
    const offset = await nodeClockOffset([node([0, 10_000])], [true], 300);
    expect(Math.abs(offset - AHEAD)).toBeLessThan(50);
    // One timeout ends the sampling: connect() waits for it once, not once per sample.
    expect(performance.now() - started).toBeLessThan(3_000);
  });
});
