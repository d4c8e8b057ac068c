/**
 * The deadline watch of quorum rounds (lib/engine/time-bound.ts), without
 * Redis: one timer for every round in flight.
 */
import { describe, expect, it } from '@jest/globals';
import { watchDeadline } from '../../lib/engine/time-bound.js';

/** Resolves with the ms from now until `expire` is called. */
const timed = (ms: number) => {
  const started = performance.now();
  let cancel!: () => void;
  const fired = new Promise<number>((resolve) => {
    cancel = watchDeadline(ms, () => resolve(performance.now() - started));
  });
  return { fired, cancel };
};

describe('watchDeadline', () => {
  it('expires each deadline when it is due, never before, whatever the order they were set in', async () => {
    const late = timed(120);
    const early = timed(40);
    const middle = timed(80);
    const [a, b, c] = await Promise.all([early.fired, middle.fired, late.fired]);
    expect(a).toBeGreaterThanOrEqual(40);
    expect(b).toBeGreaterThanOrEqual(80);
    expect(c).toBeGreaterThanOrEqual(120);
    expect(a).toBeLessThan(b);
    expect(b).toBeLessThan(c);
  });

  it('never expires a cancelled deadline, and still expires the later ones after it', async () => {
    let cancelledFired = false;
    const cancel = watchDeadline(30, () => (cancelledFired = true));
    const later = timed(60);
    cancel();
    expect(await later.fired).toBeGreaterThanOrEqual(60);
    expect(cancelledFired).toBe(false);
  });
});
