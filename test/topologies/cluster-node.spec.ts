import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomUUID } from 'node:crypto';
import { Cluster, type Redis } from 'ioredis';
import {
  LockBusyError,
  LockEngine,
  LockUnavailableError,
  type LockEngineOptions,
} from '../../lib/engine/index.js';
import { hashSlot } from '../../lib/engine/cluster-scripts.js';
import { nextLockEvent, timedHandOff } from '../support/lock-events.js';
import { readWriteLocksAndSemaphores } from './lease-primitives.js';
import { quietLogger } from '../support/quiet-logger.js';
import {
  ownerOfSlot,
  RedisClusterProcess,
  spreadOverMasters as spreadResources,
  type SlotRange,
} from '../support/redis-topologies.js';

/** A retry delay so long that only a wake-up can explain a fast hand-off. */
const SLOW_POLLING = { delay: 5000, factor: 1, maxDelay: 5000, jitter: 0 };
const keyOf = (resource: string) => `lock:{${resource}}`;

let cluster: RedisClusterProcess;
let ranges: SlotRange[];
const engines: LockEngine[] = [];
const clients: (Redis | Cluster)[] = [];

beforeAll(async () => {
  cluster = await RedisClusterProcess.start();
  ranges = await cluster.slotRanges();
}, 30_000);
afterAll(async () => {
  await Promise.all([...engines.map((e) => e.close()), ...clients.map((c) => c.quit())]);
  await cluster?.stop();
});

async function connected(options: Partial<LockEngineOptions> = {}) {
  const logger = quietLogger();
  const engine = new LockEngine({ nodes: [{ cluster: cluster.seeds }], logger, ...options });
  engines.push(engine);
  await engine.connect();
  return { engine, logger };
}

const masterOf = (resource: string) => ownerOfSlot(ranges, hashSlot(keyOf(resource)));
/** One fresh resource per master of the cluster, each in a different slot. */
const spreadOverMasters = (name: string) => spreadResources(ranges, keyOf, name);

/** What each resource's master holds in its lock key. */
const holders = (resources: readonly string[]) =>
  Promise.all(resources.map((r) => masterOf(r).cli('GET', keyOf(r))));

describe('a Redis Cluster as the only node', () => {
  let engine: LockEngine;
  beforeAll(async () => {
    let logger;
    ({ engine, logger } = await connected());
    // Three masters, AOF always, noeviction, no replicas: nothing to warn about.
    expect(logger.warnings).toEqual([]);
  });

  it('counts the whole cluster as one node, named after its seeds', () => {
    expect(engine.nodes).toHaveLength(1);
    expect(engine.quorum).toBe(1);
    expect(engine.nodes[0].topology).toBe('cluster');
    expect(engine.nodes[0].label).toBe(
      `cluster ${cluster.nodes.map((n) => `${n.host}:${n.port}`).join(',')}`,
    );
  });

  it('maps keys to the hash slots Redis does, hash tags included', async () => {
    const keys = [
      keyOf('order:42'),
      `${keyOf('order:42')}:fence`,
      'plain',
      'a{}b',
      '{}{x}',
      '{x',
      'Zürich:{ßtraße}',
      '日本語',
    ];
    const slots = await Promise.all(keys.map((k) => cluster.nodes[0].cli('CLUSTER', 'KEYSLOT', k)));
    expect(keys.map(hashSlot)).toEqual(slots.map(Number));
  });

  it('grants, extends and releases a lock on the master of its slot, with growing tokens', async () => {
    const resource = `order:${randomUUID()}`;
    const master = masterOf(resource);
    const first = await engine.tryAcquire(resource, { ttl: 2000 });
    expect(await master.cli('GET', keyOf(resource))).toBe(first.value);
    expect(Number(await master.cli('GET', `${keyOf(resource)}:fence`))).toBe(first.token);

    await engine.extend(first, 8000);
    expect(Number(await master.cli('PTTL', keyOf(resource)))).toBeGreaterThan(6000);
    expect(await first.release()).toMatchObject({ released: true, nodesReleased: 1 });
    expect(await master.cli('EXISTS', keyOf(resource))).toBe('0');

    const second = await engine.tryAcquire(resource);
    expect(second.token).toBe(first.token! + 1);
    await expect(engine.tryAcquire(resource)).rejects.toBeInstanceOf(LockBusyError);
    await second.release();
  });

  it('takes read-write locks and semaphore permits, and wakes their waiters through sharded release messages', async () => {
    const { engine: other } = await connected();
    await readWriteLocksAndSemaphores(engine, other);
  });

  describe('a lock on resources in several slots', () => {
    it('holds every key on its own master and releases them all', async () => {
      const resources = spreadOverMasters('multi');
      expect(new Set(resources.map(masterOf)).size).toBe(3);
      const lock = await engine.tryAcquire(resources);
      expect(lock.tokens).toHaveLength(3);
      expect(await holders(resources)).toEqual([lock.value, lock.value, lock.value]);
      const fences = await Promise.all(
        resources.map((r) => masterOf(r).cli('GET', `${keyOf(r)}:fence`)),
      );
      expect(fences.map(Number)).toEqual(lock.tokens);

      await engine.extend(lock, 9000);
      const leases = await Promise.all(resources.map((r) => masterOf(r).cli('PTTL', keyOf(r))));
      for (const lease of leases) expect(Number(lease)).toBeGreaterThan(7000);
      expect(await lock.release()).toMatchObject({ released: true, nodesReleased: 1 });
      expect(await holders(resources)).toEqual(['', '', '']);
    });

    it('is all or nothing: one slot held by someone else leaves no key in the others', async () => {
      const resources = spreadOverMasters('all-or-nothing');
      const other = await engine.tryAcquire(resources[1], { ttl: 3000 });
      const error = await engine.tryAcquire(resources).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(LockBusyError);
      // The holder's lease, as the hint for when to come back.
      expect((error as LockBusyError).retryAfter).toBeGreaterThan(2000);
      expect(await holders(resources)).toEqual(['', other.value, '']);

      await other.release();
      const lock = await engine.tryAcquire(resources);
      expect(await holders(resources)).toEqual([lock.value, lock.value, lock.value]);
      await lock.release();
    });

    it('is all or nothing when a master fails the call: the other slots are rolled back', async () => {
      const resources = spreadOverMasters('failing-master');
      const failing = masterOf(resources[2]);
      // Out of memory under noeviction: that master refuses every write with an OOM error.
      await failing.cli('CONFIG', 'SET', 'maxmemory', '1');
      try {
        const error = await engine.tryAcquire(resources).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(LockUnavailableError);
        expect((error as LockUnavailableError).message).toContain('OOM');
        expect(await holders(resources)).toEqual(['', '', '']);
      } finally {
        await failing.cli('CONFIG', 'SET', 'maxmemory', '0');
      }
      await (await engine.tryAcquire(resources)).release();
    });

    it('keeps the tokens of a resource in order whatever it is locked with', async () => {
      const [a, b, c] = spreadOverMasters('tokens');
      const alone = await engine.tryAcquire(b);
      await alone.release();
      const together = await engine.tryAcquire([a, b, c]);
      expect(together.tokens[1]).toBe(alone.token! + 1);
      await together.release();
      const again = await engine.tryAcquire([c, b]);
      expect(again.tokens).toEqual([together.tokens[2] + 1, together.tokens[1] + 1]);
      await again.release();
    });
  });

  it('wakes a waiter of another engine when the lock is released (sharded pub/sub)', async () => {
    const { engine: waiter } = await connected();
    for (const resource of [`wake:${randomUUID()}`, ...spreadOverMasters('wake-multi')]) {
      const lock = await engine.acquire(resource);
      const { next, ms } = await timedHandOff(lock, waiter, resource, SLOW_POLLING);
      expect(ms).toBeLessThan(1000);
      await next.release();
    }
  });

  describe('administration across the masters', () => {
    it('lists the locked resources of every master', async () => {
      const resources = spreadOverMasters('list');
      const locks = await Promise.all(resources.map((r) => engine.acquire(r)));
      const tag = resources[0].split(':')[0];
      const listed = await engine.list(`${tag}:*`);
      expect(listed).toEqual(expect.arrayContaining(resources));
      expect(await engine.list(resources[1])).toEqual([resources[1]]);
      await Promise.all(locks.map((l) => l.release()));
      expect(await engine.list(resources[1])).toEqual([]);
    });

    it('inspects a lock: holder, lease and fence counter', async () => {
      const resource = `inspect:${randomUUID()}`;
      const lock = await engine.acquire(resource, { ttl: 4000 });
      const seen = await engine.inspect(resource);
      expect(seen).toMatchObject({ resource, held: true, holder: lock.value, fence: lock.token });
      expect(seen.nodes).toEqual([expect.objectContaining({ node: engine.nodes[0].label })]);
      expect(seen.ttl).toBeGreaterThan(3000);
      await lock.release();
    });

    it('force-releases a lock and wakes its waiters', async () => {
      const { engine: waiter } = await connected();
      const resource = `force:${randomUUID()}`;
      const stuck = await engine.acquire(resource, { ttl: 20_000 });
      const contended = nextLockEvent(waiter, 'contended', resource);
      const waiting = waiter.acquire(resource, { retry: SLOW_POLLING });
      await contended;
      const forced = performance.now();
      expect(await engine.forceRelease(resource)).toBe(1);
      const next = await waiting;
      // Woken, not polling: its retry delay is 5 s (a loaded machine took 1.08 s once).
      expect(performance.now() - forced).toBeLessThan(3000);
      expect(next.token).toBe(stuck.token! + 1);
      await next.release();
      expect(await stuck.release()).toMatchObject({ released: false });
    });

    it('reports health per master: the cluster is up while every master answers', async () => {
      const health = await engine.health();
      expect(health).toMatchObject({ quorum: true, required: 1 });
      const [node] = health.nodes;
      expect(node).toMatchObject({ node: engine.nodes[0].label, up: true, error: undefined });
      expect(node.masters?.map((m) => m.node).sort()).toEqual(
        cluster.nodes.map((n) => `${n.host}:${n.port}`).sort(),
      );
      expect(node.masters?.every((m) => m.up && m.latency! >= 0)).toBe(true);
    });

    it('finds every fence counter across the masters when re-seeding (one node: nothing to raise)', async () => {
      const resources = spreadOverMasters('reseed');
      await (await engine.acquire(resources)).release();
      expect(await engine.reseedFences(`reseed:*`)).toEqual({ [engine.nodes[0].label]: 0 });
    });
  });

  it('uses an ioredis Cluster the user owns and leaves it open on close', async () => {
    const mine = new Cluster(cluster.seeds);
    clients.push(mine);
    const engine = new LockEngine({ nodes: [mine], logger: quietLogger() });
    await engine.connect();
    expect(engine.nodes[0]).toMatchObject({ topology: 'cluster', owned: false });
    const resources = spreadOverMasters('owned');
    const lock = await engine.tryAcquire(resources);
    expect(await holders(resources)).toEqual([lock.value, lock.value, lock.value]);
    await lock.release();
    await engine.close();
    expect(mine.status).toBe('ready');
    expect(await mine.ping()).toBe('PONG');
  });

  it("hears every socket of the cluster's masters past its first error, which ioredis stops listening for", async () => {
    // A refused TLS handshake can end with a second error (the server's alert); unheard, Node
    // throws it as an uncaught exception. Emitted here by hand on each live master connection.
    const { engine } = await connected();
    await engine.tryAcquire(spreadOverMasters('sockets')).then((lock) => lock.release());
    const masters = (engine.nodes[0].client as Cluster).nodes('master');
    expect(masters).toHaveLength(3);
    for (const master of masters) {
      const socket = master.stream;
      socket.emit('error', new Error('first'));
      expect(() => socket.emit('error', new Error('second'))).not.toThrow();
    }
  });

  it("hears every socket of the release channel's sharded subscribers past its first error", async () => {
    // ioredis makes a client per master inside its sharded subscriber group; a waiter's
    // subscription starts them. Each is reached through the engine's private release channel.
    const { engine } = await connected();
    const { engine: waiter } = await connected();
    for (const resource of spreadOverMasters('shard-sockets')) {
      const lock = await engine.acquire(resource);
      const { next } = await timedHandOff(lock, waiter, resource, SLOW_POLLING);
      await next.release();
    }
    const channel = (waiter as unknown as { channel: { subscribers: { connection: Cluster }[] } })
      .channel;
    const group = (
      channel.subscribers[0].connection as unknown as {
        shardedSubscribers: { shardedSubscribers: Map<string, { getInstance(): Redis }> };
      }
    ).shardedSubscribers.shardedSubscribers;
    const sockets = [...group.values()].map((shard) => shard.getInstance().stream);
    expect(sockets).toHaveLength(3);
    for (const socket of sockets) {
      socket.emit('error', new Error('first'));
      expect(() => socket.emit('error', new Error('second'))).not.toThrow();
    }
  });

  it('warns about one member of a cluster given as a plain server', async () => {
    const member = cluster.nodes[0];
    const logger = quietLogger();
    const engine = new LockEngine({ nodes: [member.url], logger });
    engines.push(engine);
    await engine.connect();
    expect(logger.warnings).toEqual([
      `node ${member.host}:${member.port} is a member of a Redis Cluster and refuses keys of the other members' slots (MOVED). ` +
        `Give the whole cluster as one node: { cluster: ['redis://${member.host}:${member.port}'] }.`,
    ]);
  });

  // Last: it changes the cluster for good.
  it('warns at connect time that a cluster with replicas can lose lock keys and counters in a failover', async () => {
    await cluster.addReplica(masterOf('any'));
    const { logger } = await connected();
    expect(logger.warnings).toEqual([
      `node ${engines.at(-1)!.nodes[0].label} is a Redis Cluster with 1 replica(s) of its masters: ` +
        'replication is asynchronous, so a failover can lose the latest lock keys (two holders at once) and ' +
        'fence counter increments (tokens can repeat). Use independent nodes without failover for locks that ' +
        'must never overlap; after a failover, delete its fence counters so that they restart from the clock ' +
        '(docs/topologies.md).',
    ]);
    const { logger: withoutTtl } = await connected({ fenceCounterTtl: 0 });
    expect(withoutTtl.warnings[0]).toContain(
      'or set fenceCounterTtl > 0 so that counters the new master lacks restart from the clock, not from 1.',
    );
  });
});
