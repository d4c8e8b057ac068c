/**
 * This process's wait queues (lib/engine/wait-queue.ts), without Redis: the
 * order in which waiters are told to ask the nodes.
 */
import { describe, expect, it } from '@jest/globals';
import { WaitQueues } from '../../lib/engine/wait-queue.js';

const FAR = () => performance.now() + 60_000;

describe('wait queues', () => {
  it('lets a head whose delay is 0 ask at once, not after a timer’s shortest delay', async () => {
    const queues = new WaitQueues();
    const first = queues.join('k', ['k'], 1);
    const second = queues.join('k', ['k'], 2);
    const waiting = second.wait(0, FAR(), undefined);
    first.leave(true);
    // A timer, even of 0 ms, would fire after this immediate; the promoted head must not need one.
    let immediate = false;
    setImmediate(() => (immediate = true));
    await waiting;
    expect(immediate).toBe(false);
    expect(second.isHead).toBe(true);
    second.leave(false);
  });

  it('keeps a waiter behind the head waiting until the head leaves, then wakes it on the next release', async () => {
    const queues = new WaitQueues();
    const first = queues.join('k', ['k'], 1);
    const second = queues.join('k', ['k'], 2);
    let asked = false;
    const waiting = second.wait(5000, FAR(), undefined).then(() => (asked = true));
    queues.released('k');
    await new Promise((resolve) => setImmediate(resolve));
    // The release woke the head, not the waiter behind it.
    expect(asked).toBe(false);
    first.leave(true);
    await new Promise((resolve) => setImmediate(resolve));
    // Promoted after a grant: it waits, as head, for that holder's release.
    expect(asked).toBe(false);
    queues.released('k');
    await waiting;
    expect(asked).toBe(true);
    second.leave(true);
    expect(queues.has('k')).toBe(false);
  });

  it('ranks waiters by when their acquisition began, not by when they lined up', () => {
    const queues = new WaitQueues();
    const later = queues.join('k', ['k'], 2000);
    const earlier = queues.join('k', ['k'], 1000);
    const same = queues.join('k', ['k'], 1000);
    expect(earlier.isHead).toBe(true);
    earlier.leave(true);
    // Equal arrivals keep the order they lined up in.
    expect(same.isHead).toBe(true);
    same.leave(true);
    expect(later.isHead).toBe(true);
    later.leave(true);
    expect(queues.has('k')).toBe(false);
  });

  it('tells an attempt made outside any queue whether a release may have gone unheard by it', () => {
    const queues = new WaitQueues();
    // A permit's release (wakes at most one) that woke a queue went to that queue's waiter.
    const head = queues.join('k\nh', ['k'], 1);
    head.waiter = 'h';
    let watch = queues.watch(['k'], () => 'w');
    queues.released('k', '', 1);
    expect(watch.end()).toBe(false);
    head.leave(false);
    // One that woke nobody, or any release that may wake every waiter, may have been this one's.
    watch = queues.watch(['k'], () => 'w');
    queues.released('k', '', 1);
    expect(watch.end()).toBe(true);
    watch = queues.watch(['k'], () => 'w');
    queues.released('k');
    expect(watch.end()).toBe(true);
    // Named by the nodes: its turn; others named: theirs.
    watch = queues.watch(['k'], () => 'w');
    queues.released('k', 'x,y');
    expect(watch.end()).toBe(false);
    watch = queues.watch(['k', 'j'], () => 'w');
    queues.released('j', 'x,w');
    expect(watch.end()).toBe(true);
    // Releases of other keys, or after the watch ended, do not count.
    watch = queues.watch(['k'], () => 'w');
    queues.released('other');
    expect(watch.end()).toBe(false);
    queues.released('k');
    expect(watch.end()).toBe(false);
  });
});
