import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { LockBusyError, LockEngine, LockUnavailableError } from '../../lib/engine/index.js';
import { hashSlot } from '../../lib/engine/cluster-scripts.js';
import { ACQUIRE, EXTEND, FENCE_WRITEBACK, RELEASE } from '../../lib/engine/lua-scripts.js';
import { nodesBack } from '../support/engine-ready.js';
import { quietLogger } from '../support/quiet-logger.js';
import type { RedisNodeProcess } from '../../dev/redis/redis-nodes.js';
import {
  ownerOfSlot,
  RedisClusterProcess,
  spreadOverMasters as spreadResources,
  type SlotRange,
} from '../support/redis-topologies.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';

const keyOf = (resource: string) => `lock:{${resource}}`;
const plain = useRedisNodes(2);
let cluster: RedisClusterProcess;
let ranges: SlotRange[];
let engine: LockEngine;

beforeAll(async () => {
  cluster = await RedisClusterProcess.start();
  ranges = await cluster.slotRanges();
  const logger = quietLogger();
  engine = new LockEngine({
    nodes: [{ cluster: cluster.seeds }, plain.nodes[0].url, plain.nodes[1].url],
    // A counter per resource on the servers too, so that the fencing rounds below compare like
    // with like; the default (one counter per server) is the last test's.
    fenceCounter: 'resource',
    logger,
  });
  await engine.connect();
  expect(logger.warnings).toEqual([]);
  await loadScripts();
}, 30_000);
afterAll(async () => {
  await engine?.close();
  await cluster?.stop();
});
afterEach(async () => {
  await nodesBack(plain.nodes, engine);
  await loadScripts();
});

/**
 * Caches the engine's scripts on every server (a restart empties the cache), so no call falls
 * back from EVALSHA to EVAL: that second send would come after reads sent in the meantime.
 */
async function loadScripts(): Promise<void> {
  const servers = [...cluster.nodes, ...plain.nodes];
  await Promise.all(
    servers.flatMap((server) =>
      [ACQUIRE, EXTEND, FENCE_WRITEBACK, RELEASE].map((s) =>
        server.cli('SCRIPT', 'LOAD', s.source),
      ),
    ),
  );
}

const masterOf = (resource: string) => ownerOfSlot(ranges, hashSlot(keyOf(resource)));
/** One fresh resource per master of the cluster, each in a different slot. */
const spreadOverMasters = (name: string) => spreadResources(ranges, keyOf, name);

/**
 * Holder and remaining lease of `resource` on each node, read through the engine's own
 * connections. The engine answers once a quorum did; a straggler's call may still wait in its
 * client's auto-pipeline, and these reads queue up behind it (the scripts are cached, see
 * loadScripts), so they see every node's answer.
 */
const seenByEngine = (resource: string) =>
  Promise.all(
    engine.nodes.map(async ({ client }) => {
      const [holder, lease] = await Promise.all([
        client.get(keyOf(resource)),
        client.pttl(keyOf(resource)),
      ]);
      return { holder, lease };
    }),
  );

/** The lock key of `resource` on the cluster (its master) and on each plain node. */
const copies = (resource: string) =>
  Promise.all([masterOf(resource), ...plain.nodes].map((n) => n.cli('GET', keyOf(resource))));

describe('a Redis Cluster as one of three nodes in a quorum', () => {
  it('counts the cluster as one node: three nodes, a quorum of two', () => {
    expect(engine.nodes.map((n) => n.topology)).toEqual(['cluster', 'server', 'server']);
    expect(engine.quorum).toBe(2);
  });

  it('holds a lock on the cluster and on both servers, with one token for all', async () => {
    const resource = `order:${randomUUID()}`;
    const lock = await engine.tryAcquire(resource);
    expect((await seenByEngine(resource)).map((n) => n.holder)).toEqual([
      lock.value,
      lock.value,
      lock.value,
    ]);
    expect(await masterOf(resource).cli('GET', keyOf(resource))).toBe(lock.value);
    const fences = await engine.inspect(resource);
    expect(fences.nodes.map((n) => n.fence)).toEqual([lock.token, lock.token, lock.token]);
    expect(await lock.release()).toMatchObject({ released: true });
    expect((await seenByEngine(resource)).map((n) => n.holder)).toEqual([null, null, null]);
  });

  it('grants with the cluster and one server while the other server is down', async () => {
    await plain.nodes[1].kill();
    const resource = `one-down:${randomUUID()}`;
    const lock = await engine.tryAcquire(resource);
    const onLiveNodes = [masterOf(resource), plain.nodes[0]].map((n) =>
      n.cli('GET', keyOf(resource)),
    );
    expect(await Promise.all(onLiveNodes)).toEqual([lock.value, lock.value]);
    await lock.release();
  });

  it('is no quorum on its own, however many masters it has', async () => {
    await Promise.all(plain.nodes.map((n) => n.kill()));
    const error = await engine.tryAcquire(`alone:${randomUUID()}`).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockUnavailableError);
    expect((error as Error).message).toContain('2 of 3');
  });

  it('locks resources in several slots on all three nodes, and all or nothing on the cluster', async () => {
    const resources = spreadOverMasters('multi');
    // Held on the cluster alone by a stale holder: the cluster refuses the set, the servers grant it.
    await masterOf(resources[0]).cli('SET', keyOf(resources[0]), 'stale', 'PX', 5000);
    // The engine answers as soon as the two servers granted; the cluster may still be rolling
    // back the slots it did grant. The masters' keyspace events say when it is done (nobody
    // waits for these keys, so the rollback sends no release message).
    const rolledBackKeys = resources.slice(1).map(async (resource) => {
      const master = masterOf(resource);
      await master.cli('CONFIG', 'SET', 'notify-keyspace-events', 'Kg');
      const watcher = new Redis(master.port, master.host);
      await watcher.subscribe(`__keyspace@0__:${keyOf(resource)}`);
      // Only the deletion: the grant's SET ... PX is an 'expire' event of the same key first.
      const deleted = new Promise<void>((resolve) =>
        watcher.on('message', (_channel: string, event: string) => {
          if (event === 'del') resolve();
        }),
      );
      return { master, watcher, deleted };
    });
    const watchers = await Promise.all(rolledBackKeys);
    try {
      const lock = await engine.tryAcquire(resources);
      await Promise.all(watchers.map((w) => w.deleted));
      const onCluster = await Promise.all(resources.map((r) => masterOf(r).cli('GET', keyOf(r))));
      expect(onCluster).toEqual(['stale', '', '']);
      for (const resource of resources) {
        expect((await copies(resource)).slice(1)).toEqual([lock.value, lock.value]);
      }
      await lock.release();
    } finally {
      for (const { master, watcher } of watchers) {
        watcher.disconnect();
        await master.cli('CONFIG', 'SET', 'notify-keyspace-events', '');
      }
    }
    await masterOf(resources[0]).cli('DEL', keyOf(resources[0]));
    await masterOf(resources[0]).cli('DEL', keyOf(resources[0]));

    // One of them held on every node: busy, until it is released.
    const other = await engine.tryAcquire(resources[2]);
    await expect(engine.tryAcquire(resources)).rejects.toBeInstanceOf(LockBusyError);
    await other.release();
    await (await engine.acquire(resources, { waitTimeout: 2000 })).release();
  });

  it('settles the tokens of resources in several slots across the quorum (fencing round 2)', async () => {
    const resources = spreadOverMasters('round-two');
    const [a, b, c] = resources;
    const fence = (node: RedisNodeProcess, r: string) =>
      node.cli('GET', `${keyOf(r)}:fence`).then(Number);
    const first = await engine.acquire(resources);
    await first.release();
    const [fa, fb, fc] = first.tokens;
    // One server has seen more grants of b; the cluster has seen more of c. With the other
    // server down, the token is final only once both carry it: round 2 must reach the cluster.
    await plain.nodes[0].cli('SET', `${keyOf(b)}:fence`, fb + 1000);
    await masterOf(c).cli('SET', `${keyOf(c)}:fence`, fc + 2000);
    await plain.nodes[1].kill();
    const lock = await engine.acquire(resources, { ttl: 4000 });
    const [ta, tb, tc] = lock.tokens;
    expect([ta, tb, tc]).toEqual([fa + 1, fb + 1001, fc + 2001]);
    // Written back in every slot of the cluster, and on the server.
    expect(await fence(masterOf(b), b)).toBe(tb);
    expect(await fence(plain.nodes[0], c)).toBe(tc);
    expect(await fence(masterOf(a), a)).toBe(ta);
    await lock.release();
    const next = await engine.acquire([c, a, b]);
    expect(next.tokens).toEqual([tc + 1, ta + 1, tb + 1]);
    await next.release();
  });

  it('extends on the cluster and the servers and reports health for each', async () => {
    const resources = spreadOverMasters('extend');
    const lock = await engine.acquire(resources, { ttl: 2000 });
    await engine.extend(lock, 9000);
    for (const r of resources) {
      expect((await seenByEngine(r)).map((n) => [n.holder, n.lease > 7000])).toEqual([
        [lock.value, true],
        [lock.value, true],
        [lock.value, true],
      ]);
    }
    await lock.release();
    const health = await engine.health();
    expect(health.quorum).toBe(true);
    expect(health.nodes.map((n) => [n.up, n.masters?.length])).toEqual([
      [true, 3],
      [true, undefined],
      [true, undefined],
    ]);
  });

  it('by default counts tokens with one counter per server and per resource on the cluster, and keeps them rising', async () => {
    const counting = new LockEngine({
      nodes: [{ cluster: cluster.seeds }, plain.nodes[0].url, plain.nodes[1].url],
      logger: quietLogger(),
    });
    await counting.connect();
    try {
      const resources = spreadOverMasters('node-counter');
      const first = await counting.acquire(resources);
      await first.release();
      // The cluster has seen many more grants of the second resource than the servers; with one
      // server down, the quorum is the cluster and the other server.
      const [, b] = resources;
      await masterOf(b).cli('SET', `${keyOf(b)}:fence`, first.tokens[1] + 5000);
      await plain.nodes[1].kill();
      const second = await counting.acquire(resources);
      expect(second.tokens[1]).toBe(first.tokens[1] + 5001);
      second.tokens.forEach((token, i) => expect(token).toBeGreaterThan(first.tokens[i]));
      // The server's one counter was raised to that token (write-back); its next grant goes on from there.
      expect(Number(await plain.nodes[0].cli('GET', 'lock:fence'))).toBe(
        Math.max(...second.tokens),
      );
      await second.release();
      const third = await counting.acquire(b);
      expect(third.tokens[0]).toBeGreaterThan(second.tokens[1]);
      await third.release();
    } finally {
      await counting.close();
    }
  });
});
