import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { randomUUID } from 'node:crypto';
import { LockEngine, LockLostError } from '../../lib/engine/index.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';
import { engineReady, nodesBack } from '../support/engine-ready.js';
import { nextLockEvent } from '../support/lock-events.js';
import { quietLogger } from '../support/quiet-logger.js';

const redis = useRedisNodes(3);
const unique = (name: string) => `${name}:${randomUUID()}`;
const label = (i: number) => `${redis.nodes[i].host}:${redis.nodes[i].port}`;

describe('inspection and administration', () => {
  let engine: LockEngine;
  beforeAll(async () => {
    engine = new LockEngine({ nodes: redis.nodes.map((n) => n.url), logger: quietLogger() });
    await engine.connect();
  });
  afterAll(() => engine.close());
  afterEach(async () => {
    await nodesBack(redis.nodes, engine);
  });

  it('inspects a held lock: holder, lease and fence counter per node', async () => {
    const resource = unique('inspect');
    const lock = await engine.acquire(resource, { ttl: 4000 });
    const seen = await engine.inspect(resource);
    expect(seen).toMatchObject({ resource, held: true, holder: lock.value, fence: lock.token });
    expect(seen.ttl).toBeGreaterThan(3000);
    // The grant was done at a quorum; the third node's copy may still be on its way.
    expect(seen.nodes.filter((n) => n.holder === lock.value).length).toBeGreaterThanOrEqual(2);
    await lock.release();
    const free = await engine.inspect(resource);
    expect(free).toMatchObject({ held: false, holder: undefined, fence: lock.token });
    // Likewise the release: at most the third node can still show it, for a moment.
    expect(free.nodes.filter((n) => n.holder !== null).length).toBeLessThanOrEqual(1);
  });

  it('reports a node that does not answer in an inspection without failing it', async () => {
    const resource = unique('inspect-down');
    const lock = await engine.acquire(resource);
    await redis.nodes[2].kill();
    const seen = await engine.inspect(resource);
    expect(seen.held).toBe(true);
    expect(seen.nodes[2]).toMatchObject({ node: label(2), holder: undefined });
    expect(seen.nodes[2].error).toBeDefined();
    await lock.release();
  });

  it('lists the locked resources that match a pattern', async () => {
    const tag = randomUUID();
    const locks = await Promise.all(
      ['a', 'b', 'c'].map((name) => engine.acquire(`list:${tag}:${name}`)),
    );
    const other = await engine.acquire(`elsewhere:${tag}`);
    // A key on one node of three (an attempt that lost the vote) is no lock.
    await redis.nodes[0].cli('SET', `lock:{list:${tag}:stray}`, 'lost-vote', 'PX', '10000');
    expect(await engine.list(`list:${tag}:*`)).toEqual([
      `list:${tag}:a`,
      `list:${tag}:b`,
      `list:${tag}:c`,
    ]);
    expect(await engine.list(`list:${tag}:*`, 2)).toHaveLength(2);
    const results = await Promise.all([...locks, other].map((l) => l.release()));
    expect(results.every((r) => r.released)).toBe(true);
    // A release is done at a quorum (the third node's may still be on its way): no longer held.
    for (const lock of locks) expect((await engine.inspect(lock.resources[0])).held).toBe(false);
    const left = await engine.list(`list:${tag}:*`);
    // (The stray counts only while a node does not answer: then one node may be all a lock shows.)
    expect(left.filter((resource) => !resource.endsWith(':stray'))).toEqual([]);
  });

  it('force-releases a stuck lock: a waiter gets it at once and the old holder cannot extend', async () => {
    const resource = unique('stuck');
    const stuck = await engine.acquire(resource, { ttl: 60_000 });
    const waiter = new LockEngine({ nodes: redis.nodes.map((n) => n.url), logger: quietLogger() });
    await waiter.connect();
    const contended = nextLockEvent(waiter, 'contended', resource);
    const waiting = waiter.acquire(resource, {
      retry: { delay: 5000, factor: 1, maxDelay: 5000, jitter: 0 },
    });
    await contended;
    expect(await engine.forceRelease(resource)).toBe(3);
    const next = await waiting;
    expect(next.token).toBeGreaterThan(stuck.token!);
    await expect(stuck.extend()).rejects.toBeInstanceOf(LockLostError);
    await next.release();
    await waiter.close();
  });

  it('reports each node up or down with its latency, and whether a quorum is reachable', async () => {
    const healthy = await engine.health();
    expect(healthy.quorum).toBe(true);
    expect(healthy.required).toBe(2);
    expect(healthy.nodes.every((n) => n.up && n.latency! >= 0)).toBe(true);
    await Promise.all([redis.nodes[0].kill(), redis.nodes[1].kill()]);
    const down = await engine.health();
    expect(down.quorum).toBe(false);
    expect(down.nodes.map((n) => n.up)).toEqual([false, false, true]);
    expect(down.nodes[0].error).toBeDefined();
  });
});

describe('re-seeding the fence counters of a node that lost its data', () => {
  let exact: LockEngine;
  beforeAll(async () => {
    // Counters that never expire count from 1: a wiped node forgets them for good.
    exact = new LockEngine({
      nodes: redis.nodes.map((n) => n.url),
      fenceCounterTtl: 0,
      logger: quietLogger(),
    });
    await exact.connect();
  });
  afterAll(() => exact.close());
  afterEach(async () => {
    await nodesBack(redis.nodes, exact);
  });

  /**
   * Node C misses five grants (it is down), node A is wiped, and then B is down:
   * the next grant can only come from A and C, neither of which remembers the tokens.
   */
  async function lagThenWipe(resource: string): Promise<number> {
    const [a, , c] = redis.nodes;
    await c.kill();
    let last = 0;
    for (let i = 0; i < 5; i++) {
      const lock = await exact.acquire(resource);
      last = lock.token!;
      await lock.release();
    }
    await c.restart();
    await a.cli('FLUSHALL');
    await engineReady(exact);
    return last;
  }

  it('without it, the next grant can repeat an old token (what the procedure prevents)', async () => {
    const resource = unique('no-reseed');
    const last = await lagThenWipe(resource);
    await redis.nodes[1].kill();
    const lock = await exact.acquire(resource, { waitTimeout: 10_000 });
    expect(lock.token).toBeLessThanOrEqual(last);
    await lock.release();
  });

  it('with it, the next grant from the same two nodes is above every earlier token', async () => {
    const resource = unique('reseed');
    const last = await lagThenWipe(resource);
    const raised = await exact.reseedFences();
    expect(raised[label(0)]).toBeGreaterThanOrEqual(1);
    expect(raised[label(2)]).toBeGreaterThanOrEqual(1);
    expect(raised[label(1)]).toBe(0);
    await redis.nodes[1].kill();
    const lock = await exact.acquire(resource, { waitTimeout: 10_000 });
    expect(lock.token).toBe(last + 1);
    await lock.release();
  });
});
