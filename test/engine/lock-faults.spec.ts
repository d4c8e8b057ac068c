import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { LockBusyError, LockEngine, LockUnavailableError } from '../../lib/engine/index.js';
import { nodesBack } from '../support/engine-ready.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';
import { quietLogger } from '../support/quiet-logger.js';

const redis = useRedisNodes(5);
const unique = (name: string) => `${name}:${randomUUID()}`;

describe('faults on real nodes', () => {
  let engine: LockEngine;

  beforeAll(async () => {
    engine = new LockEngine({
      nodes: redis.nodes.map((n) => n.url),
      ttl: 2000,
      logger: quietLogger(),
    });
    await engine.connect();
  });
  afterAll(() => engine.close());
  afterEach(async () => {
    // Every scenario leaves all five nodes running for the next one, and the engine connected to
    // them: a client still reconnecting would count as a failed node.
    await nodesBack(redis.nodes, engine);
  });

  it('still grants locks with a minority of nodes killed', async () => {
    await Promise.all([redis.nodes[0].kill(), redis.nodes[3].kill()]);
    const lock = await engine.tryAcquire(unique('minority'));
    expect(lock.isHeld).toBe(true);
    const result = await lock.release();
    expect(result.released).toBe(true);
    expect(result.failures.map((f) => f.node).sort()).toEqual(
      [redis.nodes[0], redis.nodes[3]].map((n) => `${n.host}:${n.port}`).sort(),
    );
  });

  it('fails with LockUnavailableError within the wait bound when a majority is killed, and recovers', async () => {
    const resource = unique('majority');
    await Promise.all([redis.nodes[1].kill(), redis.nodes[2].kill(), redis.nodes[4].kill()]);
    let started = performance.now();
    const single = await engine.tryAcquire(resource).catch((e: unknown) => e);
    expect(single).toBeInstanceOf(LockUnavailableError);
    // Every killed node is reported (and any other that is still reconnecting).
    const failed = (single as LockUnavailableError).failures.map((f) => f.node);
    for (const node of [redis.nodes[1], redis.nodes[2], redis.nodes[4]])
      expect(failed).toContain(`${node.host}:${node.port}`);
    expect((single as Error).message).toMatch(/3 of 5 Redis nodes must answer, but [345] failed/);
    expect(performance.now() - started).toBeLessThan(500);

    started = performance.now();
    const waited = await engine.acquire(resource, { waitTimeout: 300 }).catch((e: unknown) => e);
    expect(waited).toBeInstanceOf(LockUnavailableError);
    expect(performance.now() - started).toBeLessThan(1500);

    await Promise.all([
      redis.nodes[1].restart(),
      redis.nodes[2].restart(),
      redis.nodes[4].restart(),
    ]);
    // The clients reconnect on their own; an acquire that waits through the outage (its own
    // budget, unavailableTimeout) gets the lock once they have.
    const lock = await engine.acquire(resource, {
      waitTimeout: 10_000,
      unavailableTimeout: 10_000,
    });
    expect(lock.isHeld).toBe(true);
    await lock.release();
  });

  /** An engine of the first three nodes, with its own per-node timeout. */
  async function threeNodeEngine(nodeTimeout: number): Promise<LockEngine> {
    const small = new LockEngine({
      nodes: redis.nodes.slice(0, 3).map((n) => n.url),
      ttl: 2000,
      nodeTimeout,
      logger: quietLogger(),
    });
    await small.connect();
    return small;
  }

  it('does not stall on a paused (SIGSTOPped) node beyond the per-node timeout', async () => {
    const small = await threeNodeEngine(500);
    await redis.nodes[0].pause();
    try {
      let started = performance.now();
      const lock = await small.tryAcquire(unique('paused-one'));
      expect(performance.now() - started).toBeLessThan(500);
      await lock.release();

      await redis.nodes[1].pause();
      started = performance.now();
      await expect(small.tryAcquire(unique('paused-two'))).rejects.toBeInstanceOf(
        LockUnavailableError,
      );
      const elapsed = performance.now() - started;
      expect(elapsed).toBeGreaterThanOrEqual(499);
      expect(elapsed).toBeLessThan(1500);
    } finally {
      await Promise.all([redis.nodes[0].resume(), redis.nodes[1].resume()]);
      await small.close();
    }
  });

  it('counts replies that came in while the event loop was blocked past the per-node timeout', async () => {
    const small = await threeNodeEngine(100);
    const paused = redis.nodes.slice(0, 2);
    await Promise.all(paused.map((n) => n.pause()));
    try {
      const attempt = small.tryAcquire(unique('blocked-loop'));
      // 30 ms into the round (its timer is at 100 ms) the two nodes it needs wake up and answer
      // at once, while this process is busy for 300 ms (outside the timers phase, as a request
      // handler would be): the next turn of the loop finds the timer overdue before it reads the
      // replies waiting in the sockets. The replies must win.
      setTimeout(
        () =>
          setImmediate(() => {
            for (const node of paused) process.kill(node.pid!, 'SIGCONT');
            const until = performance.now() + 300;
            while (performance.now() < until);
          }),
        30,
      );
      const lock = await attempt;
      expect(lock.isHeld).toBe(true);
      expect((await lock.release()).failures).toEqual([]);
    } finally {
      await Promise.all(paused.map((n) => n.resume()));
      await small.close();
    }
  });

  it('calls a held lock busy, not unavailable, while a minority of nodes is down', async () => {
    const resource = unique('busy-minority');
    const lock = await engine.acquire(resource);
    await Promise.all([redis.nodes[1].kill(), redis.nodes[3].kill()]);
    // A 10 s lease gives the nodes 1 s to answer: the three that are up must all say no, and a
    // stall of the machine past the 200 ms of a 2 s lease would count one as failed.
    const error = await engine.tryAcquire(resource, { ttl: 10_000 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockBusyError);
    expect((error as LockBusyError).retryAfter).toBeGreaterThan(0);
    await lock.release();
  });

  it('keeps working after SCRIPT FLUSH on a node mid-run', async () => {
    const resource = unique('flush');
    const first = await engine.tryAcquire(resource);
    await Promise.all(redis.nodes.map((n) => n.cli('SCRIPT', 'FLUSH')));
    await first.extend();
    await first.release();
    await Promise.all(redis.nodes.map((n) => n.cli('SCRIPT', 'FLUSH')));
    const second = await engine.tryAcquire(resource);
    expect(second.token).toBeGreaterThan(first.token!);
    const result = await second.release();
    expect(result.nodesReleased).toBeGreaterThanOrEqual(engine.quorum);
  });

  it('keeps fencing tokens increasing after every node is killed and restarted from its AOF', async () => {
    const resource = unique('restart');
    let last = 0;
    for (let i = 0; i < 20; i++) {
      const lock = await engine.tryAcquire(resource);
      expect(lock.token).toBeGreaterThan(last);
      last = lock.token!;
      await lock.release();
    }
    await Promise.all(redis.nodes.map((n) => n.kill()));
    await Promise.all(redis.nodes.map((n) => n.restart()));
    const lock = await engine.acquire(resource, {
      waitTimeout: 10_000,
      unavailableTimeout: 10_000,
    });
    expect(lock.token).toBeGreaterThan(last);
    await lock.release();
  });

  it('counts a node whose key another program owns with another type as failed, naming the problem', async () => {
    const resource = unique('wrongtype');
    const clients = redis.nodes.slice(0, 3).map((n) => new Redis(n.url));
    await Promise.all(clients.map((c) => c.lpush(`lock:{${resource}}`, 'not a lock')));
    const error = await engine.tryAcquire(resource).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockUnavailableError);
    expect((error as Error).message).toMatch(/WRONGTYPE/);
    await Promise.all(clients.map((c) => c.quit()));
  });
});
