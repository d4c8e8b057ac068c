import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { randomUUID } from 'node:crypto';
import { LockEngine, LockLostError } from '../../lib/engine/index.js';
import {
  compareCounterLifetimes,
  explainNodeError,
  judgeLock,
  sampleCounterLifetimes,
  type LockVerdict,
  type NodeLockState,
} from '../../lib/engine/internal.js';
import { escapeGlob, fenceKeyPattern, lockKeyPattern } from '../../lib/engine/admin/key-scan.js';
import { judgeInspection } from '../../lib/engine/lock-admin.js';
import { bounded } from '../../lib/engine/time-bound.js';
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

describe('lock verdicts', () => {
  /** One node's answer: a holder, free (null), or no answer (undefined). */
  const node = (holder: string | null | undefined, i: number): NodeLockState => ({
    node: `n${i}`,
    holder,
    ttl: holder === undefined ? undefined : holder === null ? -2 : 5000,
    fence: holder === undefined ? undefined : 7,
    ...(holder === undefined ? { error: 'no answer' } : {}),
  });
  const verdictOf = (holders: readonly (string | null | undefined)[]) => {
    const quorum = Math.floor(holders.length / 2) + 1;
    return judgeLock(judgeInspection('order:42', holders.map(node), quorum), quorum);
  };
  type Counts = { verdict: LockVerdict; answered: number; holding: number; keyed: number };

  it.each<[string, (string | null | undefined)[], Counts]>([
    [
      'every node holds one value',
      ['a', 'a', 'a'],
      { verdict: 'held', answered: 3, holding: 3, keyed: 3 },
    ],
    [
      'a quorum holds it, one node is free',
      ['a', 'a', null],
      { verdict: 'held', answered: 3, holding: 2, keyed: 2 },
    ],
    [
      'a key on one node of three that answered',
      ['a', null, null],
      { verdict: 'free', answered: 3, holding: 0, keyed: 1 },
    ],
    [
      'no key, one node silent: no value can reach a quorum',
      [null, null, undefined],
      { verdict: 'free', answered: 2, holding: 0, keyed: 0 },
    ],
    [
      'a key on one node and one silent, which could hold it too',
      ['a', null, undefined],
      { verdict: 'unknown', answered: 2, holding: 0, keyed: 1 },
    ],
    [
      'two silent nodes of three',
      [null, undefined, undefined],
      { verdict: 'unknown', answered: 1, holding: 0, keyed: 0 },
    ],
    [
      'two values on two nodes each of five, none silent',
      ['a', 'a', 'b', 'b', null],
      { verdict: 'free', answered: 5, holding: 0, keyed: 4 },
    ],
    [
      'two values on two nodes each of five, one silent',
      ['a', 'a', 'b', 'b', undefined],
      { verdict: 'unknown', answered: 4, holding: 0, keyed: 4 },
    ],
  ])('%s', (_, holders, counts) => {
    expect(verdictOf(holders)).toMatchObject(counts);
  });

  it('keeps the inspection it judged', () => {
    const inspection = judgeInspection('order:42', ['a', 'a', null].map(node), 2);
    expect(judgeLock(inspection, 2).inspection).toBe(inspection);
  });
});

describe('what an operator is told about a node that failed', () => {
  it("says why a node is not connected, and passes a connected node's error on as it is", async () => {
    await redis.nodes[2].kill();
    const engine = new LockEngine({ nodes: redis.nodes.map((n) => n.url), logger: quietLogger() });
    try {
      await engine.connect();
      const seen = await engine.inspect(unique('explain'));
      expect(seen.nodes[2].error).toBeDefined();
      expect(explainNodeError(engine.nodes[2], seen.nodes[2].error)).toBe(
        `not connected (connect ECONNREFUSED ${label(2)})`,
      );
      expect(explainNodeError(engine.nodes[0], 'WRONGTYPE reply')).toBe('WRONGTYPE reply');
      expect(explainNodeError(engine.nodes[0], undefined)).toBeUndefined();
      // A label no node has: the error as it came.
      expect(explainNodeError(undefined, 'lost')).toBe('lost');
    } finally {
      await engine.close();
      await nodesBack(redis.nodes);
    }
  });
});

describe('fence counter lifetimes', () => {
  const urls = () => redis.nodes.map((n) => n.url);
  const labels = () => [0, 1, 2].map(label);
  const engines: LockEngine[] = [];
  /** An engine with counters per resource under a prefix of its own, after one lock. */
  async function countedBy(fenceCounterTtl: number) {
    const keyPrefix = `lifetimes-${randomUUID()}:`;
    const engine = new LockEngine({
      nodes: urls(),
      keyPrefix,
      fenceCounter: 'resource',
      fenceCounterTtl,
      logger: quietLogger(),
    });
    engines.push(engine);
    await engine.connect();
    const lock = await engine.acquire('order:1');
    await lock.release();
    return { engine, keyPrefix };
  }
  afterEach(async () => {
    await nodesBack(redis.nodes);
    await Promise.all(engines.splice(0).map((e) => e.close()));
  });

  it('samples counters that never expire (fenceCounterTtl 0) and counters that do, per node', async () => {
    const forever = await countedBy(0);
    expect(
      await sampleCounterLifetimes(forever.engine.nodes, forever.keyPrefix, '*', 2500),
    ).toEqual({ forever: labels(), expiring: [] });
    const expiring = await countedBy(3_600_000);
    expect(
      await sampleCounterLifetimes(expiring.engine.nodes, expiring.keyPrefix, 'order:*', 2500),
    ).toEqual({ forever: [], expiring: labels() });
    // Only the counters of the resources matching the pattern.
    expect(
      await sampleCounterLifetimes(expiring.engine.nodes, expiring.keyPrefix, 'user:*', 2500),
    ).toEqual({ forever: [], expiring: [] });
  });

  it('leaves out a node that does not answer in time, without waiting for it', async () => {
    const { engine, keyPrefix } = await countedBy(0);
    await redis.nodes[2].pause();
    const start = performance.now();
    const sample = await sampleCounterLifetimes(engine.nodes, keyPrefix, '*', 300);
    expect(performance.now() - start).toBeLessThan(2000);
    expect(sample).toEqual({ forever: labels().slice(0, 2), expiring: [] });
  });

  it('refuses a lifetime for counters that never expire, and notes counters kept for good', () => {
    const none = { forever: [], expiring: [] };
    expect(compareCounterLifetimes(none, 0)).toBeUndefined();
    expect(compareCounterLifetimes(none, 60_000)).toBeUndefined();
    expect(compareCounterLifetimes({ forever: ['a'], expiring: [] }, 0)).toBeUndefined();
    expect(compareCounterLifetimes({ forever: [], expiring: ['a'] }, 60_000)).toBeUndefined();
    expect(compareCounterLifetimes({ forever: ['a', 'c'], expiring: ['b'] }, 60_000)).toEqual({
      kind: 'would-lapse',
      nodes: ['a', 'c'],
    });
    expect(compareCounterLifetimes({ forever: [], expiring: ['b'] }, 0)).toEqual({
      kind: 'kept-forever',
      nodes: ['b'],
    });
    // Mixed lifetimes with 0: raising for good is the safe side, nothing to say.
    expect(compareCounterLifetimes({ forever: ['a'], expiring: ['b'] }, 0)).toBeUndefined();
  });
});

describe('key patterns and time bounds of the admin reads', () => {
  it('escapes the glob characters of the key prefix and keeps the resource pattern a glob', () => {
    expect(escapeGlob('a*b?[c]\\d')).toBe('a\\*b\\?\\[c\\]\\\\d');
    expect(lockKeyPattern('app*:', 'order:*')).toBe('app\\*:{order:*}');
    expect(fenceKeyPattern('app*:', 'order:*')).toBe('app\\*:{order:*}:fence');
  });

  it('gives up on a read that does not settle in time, and passes on one that does', async () => {
    await expect(bounded(new Promise<never>(() => undefined), 20)).rejects.toThrow(
      'no answer within 20 ms',
    );
    await expect(bounded(Promise.resolve('OK'), 1000)).resolves.toBe('OK');
    await expect(bounded(Promise.reject(new Error('refused')), 1000)).rejects.toThrow('refused');
  });
});
