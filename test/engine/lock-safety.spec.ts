/**
 * What a holder can rely on when commands run without their replies being
 * counted, when nodes restart without their data, and when waiters crash or
 * want several keys: each case reproduced on real redis-server processes,
 * with the suite's fault proxy where replies must be slow.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { once } from 'node:events';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import {
  LockBusyError,
  LockEngine,
  LockUnavailableError,
  type Lock,
  type LockEngineOptions,
  type NodeRestart,
} from '../../lib/engine/index.js';
import { ACQUIRE, MAX_LINE, RELEASE } from '../../lib/engine/lua-scripts.js';
import { FaultProxy, PASS } from '../chaos/fault-proxy.js';
import { nextReady } from '../support/engine-ready.js';
import { nextLockEvent } from '../support/lock-events.js';
import { quietLogger } from '../support/quiet-logger.js';
import {
  type RedisNodeProcess,
  startRedisNodes,
  stopRedisNodes,
} from '../../dev/redis/redis-nodes.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';

const redis = useRedisNodes(3);
const unique = (name: string) => `${name}:${randomUUID()}`;
const keyOf = (resource: string) => `lock:{${resource}}`;

const engines: LockEngine[] = [];
const clients: Redis[] = [];

async function engineOn(
  nodes: LockEngineOptions['nodes'],
  options: Partial<LockEngineOptions> = {},
): Promise<LockEngine> {
  const engine = new LockEngine({ nodes: [...nodes], logger: quietLogger(), ...options });
  engines.push(engine);
  await engine.connect();
  return engine;
}

function admin(url: string): Redis {
  const client = new Redis(url);
  clients.push(client);
  return client;
}

afterAll(async () => {
  await Promise.all(engines.map((e) => e.close()));
  clients.forEach((c) => c.disconnect());
});

describe('validity never exceeds what the commands that may have run allow', () => {
  let proxies: FaultProxy[] = [];
  beforeAll(async () => {
    proxies = await Promise.all(redis.nodes.map((n) => FaultProxy.start(n.port)));
  });
  afterEach(() => proxies.forEach((p) => p.set(PASS)));
  afterAll(() => Promise.all(proxies.map((p) => p.close())));

  it('an extension to a shorter lease whose replies come too late leaves no more validity than that lease', async () => {
    const urls = proxies.map((p) => p.url);
    const holder = await engineOn(urls, { ttl: 5000 });
    const other = await engineOn(urls, { ttl: 5000 });
    const resource = unique('shorter');
    const lock = await holder.tryAcquire(resource);
    const lost = once(lock.signal, 'abort');
    proxies[1].set({ kind: 'delay', ms: 500 });
    proxies[2].set({ kind: 'delay', ms: 500 });
    const extension = lock.extend(200);
    // extend() reads its start before it returns: the extension leaves no earlier than that. Read
    // before the call, this moment would be early by whatever stall came in between, and a stall
    // past the drift (4 ms) failed the test under load.
    const sent = performance.now();
    await expect(extension).rejects.toBeInstanceOf(LockUnavailableError);
    // The nodes now end the lease about 200 ms after the extension left; so must the lock.
    expect(lock.validUntil).toBeLessThanOrEqual(sent + 200);
    proxies.forEach((p) => p.set(PASS));
    const second = await other.acquire(resource, { waitTimeout: 2000 });
    // Whenever the second holder got it, the first no longer counted on its lease.
    expect(lock.isHeld).toBe(false);
    await lost;
    await second.release();
  });
});

describe('a node that restarts without its data', () => {
  let volatile: RedisNodeProcess[] = [];
  beforeAll(async () => {
    volatile = await startRedisNodes(2, { appendonly: false });
  });
  afterAll(() => stopRedisNodes(volatile));

  it.each([
    ['its own', 10_000],
    // Another instance locks with a longer lease (a per-call or @Locked() ttl): the second engine
    // learns it from the record on the nodes that kept it, not from its own calls.
    ['another engine’s longer', 500],
  ])(
    'does not count toward a quorum for the longest lease it may have forgotten: %s',
    async (_, ttl) => {
      const [a, b] = volatile;
      const durable = redis.nodes[0];
      const urls = [a.url, b.url, durable.url];
      const first = await engineOn(urls, { fencing: false, ttl: 10_000 });
      const second = await engineOn(urls, { fencing: false, ttl });
      const restartOf = (node: RedisNodeProcess) =>
        new Promise<NodeRestart>((resolve) => {
          const listener = (restart: NodeRestart) => {
            if (restart.node !== `${node.host}:${node.port}`) return;
            second.off('nodeRestarted', listener);
            resolve(restart);
          };
          second.on('nodeRestarted', listener);
        });
      const resource = unique('forgotten');
      // The lock stands on exactly a quorum: a and b.
      await durable.kill();
      const lock = await first.tryAcquire(resource);
      const durableBack = restartOf(durable);
      await durable.restart();
      expect(await durableBack).toMatchObject({ persistent: true, excludedFor: 0 });
      // b crashes and comes back empty; the second engine sees its new run id once it reconnects.
      const bBack = restartOf(b);
      await b.kill();
      await b.restart();
      expect(await bBack).toEqual({
        node: `${b.host}:${b.port}`,
        runId: expect.any(String),
        persistent: false,
        excludedFor: 10_000,
      });
      // The record every engine keeps of its longest lease, on a node that was not restarted.
      expect(await a.cli('GET', 'lock:longest-lease')).toBe('10000');
      expect(Number(await a.cli('PTTL', 'lock:longest-lease'))).toBeGreaterThan(0);
      // b and the durable node would grant it: two holders, if b counted.
      await expect(second.tryAcquire(resource)).rejects.toBeInstanceOf(LockBusyError);
      expect(lock.isHeld).toBe(true);
      await lock.release();
    },
  );

  it('tells a caller that restarted nodes keep it out to wait for them, not to check that they run', () => {
    const kept = (node: string) => ({
      node,
      error: new Error(
        'granted, but not counted toward the quorum: it restarted without proof that it kept its data; its grants count again in 7931 ms',
      ),
    });
    const error = new LockUnavailableError(['r'], [kept('b:6379'), kept('c:6379')], 2, 3);
    expect(error.message).toContain(
      'Those nodes answered but restarted without proof that they kept their data',
    );
    expect(error.message).not.toContain('running and reachable');
  });

  it('counts a node that proves it kept its data (appendonly, appendfsync always) at once', async () => {
    const durable = redis.nodes[1];
    const engine = await engineOn(redis.nodes.map((n) => n.url));
    const restarted = once(engine, 'nodeRestarted') as Promise<[NodeRestart]>;
    await durable.restart();
    const [restart] = await restarted;
    expect(restart).toMatchObject({ persistent: true, excludedFor: 0 });
    const lock = await engine.tryAcquire(unique('durable'));
    expect(lock.isHeld).toBe(true);
    await lock.release();
  });
});

describe("waiters' lines", () => {
  it('a waiter for several keys does not keep a free one of them from a caller that wants it alone', async () => {
    const urls = redis.nodes.map((n) => n.url);
    const [holder, multi, single] = await Promise.all([
      engineOn(urls),
      engineOn(urls),
      engineOn(urls),
    ]);
    const k = unique('free');
    const l = unique('held');
    const held = await holder.tryAcquire(l);
    const contended = nextLockEvent(multi, 'contended', k, 2);
    const waiting = multi.acquire([k, l], { waitTimeout: 10_000 });
    // Refused twice: the second attempt is the one that keeps (or leaves) places in the lines.
    await contended;
    const started = performance.now();
    const alone = await single.acquire(k, { waitTimeout: 3000 });
    expect(performance.now() - started).toBeLessThan(1000);
    await alone.release();
    await held.release();
    const both = await waiting;
    expect(both.resources).toEqual([k, l]);
    await both.release();
  });

  it('a crashed waiter holds a free lock for less than a second, whatever the ttl', async () => {
    const urls = redis.nodes.map((n) => n.url);
    const options = { ttl: 30_000 };
    const [holder, crashing, next] = await Promise.all([
      engineOn(urls, options),
      engineOn(urls, options),
      engineOn(urls, options),
    ]);
    const resource = unique('crashed');
    const held = await holder.tryAcquire(resource);
    const lined = nextLockEvent(crashing, 'contended', resource, 2);
    const doomed = crashing.acquire(resource, { waitTimeout: 60_000 }).catch((e: unknown) => e);
    await lined;
    // Its connections go without a word, as when its process dies: its places stay in the lines.
    for (const node of crashing.nodes) node.client.disconnect();
    const line = await admin(redis.nodes[0].url).hgetall(`${keyOf(resource)}:q`);
    expect(Object.keys(line)).toHaveLength(1);
    // Its place ends on the node's clock well under a second after its last attempt...
    const [seconds, micros] = await admin(redis.nodes[0].url).time();
    const nodeNow = Number(seconds) * 1000 + Number(micros) / 1000;
    const expiry = Number(Object.values(line)[0].split(' ')[1]);
    expect(expiry - nodeNow).toBeLessThan(1000);
    await held.release();
    const freed = performance.now();
    const lock = await next.acquire(resource, { waitTimeout: 10_000 });
    // ...so the lock, freed now, waits for the dead waiter at most that long, plus one retry delay.
    expect(performance.now() - freed).toBeLessThan(1500);
    await lock.release();
    await crashing.close();
    await doomed;
  });

  it(`keeps at most ${MAX_LINE} places in a line`, async () => {
    const client = admin(redis.nodes[2].url);
    const resource = unique('long-line');
    const key = keyOf(resource);
    await client.set(key, 'someone', 'PX', 10_000);
    for (let i = 0; i < MAX_LINE + 10; i++) {
      const reply = await client.eval(
        ACQUIRE.source,
        1,
        key,
        `value-${i}`,
        5000,
        1,
        '0',
        0,
        0,
        `waiter-${i}`,
        Date.now(),
        5000,
      );
      expect(reply).toEqual([0, expect.any(Number)]);
    }
    expect(await client.hlen(`${key}:q`)).toBe(MAX_LINE);
    // A waiter that has a place renews it even when the line is full.
    const before = await client.hget(`${key}:q`, 'waiter-0');
    await client.eval(ACQUIRE.source, 1, key, 'v', 5000, 1, '0', 0, 0, 'waiter-0', 1, 9000);
    expect(await client.hget(`${key}:q`, 'waiter-0')).not.toBe(before);
    await client.del(key, `${key}:q`);
  });
});

describe('scripts on a connection', () => {
  /**
   * An acquisition and, in the turn after it, its release, on an engine of
   * one node behind a proxy that delays every reply by 200 ms: both leave
   * before the acquisition's reply is back. `forget` runs on the node first
   * (its scripts are loaded on the connection by a first lock before).
   */
  async function acquireThenRelease(forget: (client: Redis) => Promise<unknown>) {
    const node = redis.nodes[0];
    const proxy = await FaultProxy.start(node.port);
    try {
      const client = admin(node.url);
      const engine = await engineOn([proxy.url]);
      await (await engine.tryAcquire(unique('first'))).release();
      const [lockNode] = engine.nodes;
      const key = keyOf(unique('flushed'));
      await forget(client);
      proxy.set({ kind: 'delay', ms: 200 });
      const value = randomUUID();
      const acquiring = lockNode.run(ACQUIRE, [key], [value, 10_000, 1, '0', 0, 0]);
      await new Promise((resolve) => setImmediate(resolve));
      const releasing = lockNode.run(RELEASE, [key], [value, '0']);
      const [acquired, released] = await Promise.allSettled([acquiring, releasing]);
      return { acquired, released, keyLeft: await client.exists(key) };
    } finally {
      await proxy.close();
    }
  }

  it('a call refused with NOSCRIPT is never re-sent behind a later call', async () => {
    // The node forgets the acquire script, not the release script: the release runs.
    const { acquired, keyLeft } = await acquireThenRelease(async (client) => {
      await client.script('FLUSH');
      await client.script('LOAD', RELEASE.source);
    });
    expect(acquired.status).toBe('rejected');
    // Re-sent after the release, the acquisition would leave a key nobody holds.
    expect(keyLeft).toBe(0);
  });

  it('after SCRIPT FLUSH, sends every call it refused again, in their order', async () => {
    // Both refused: they go again in the order they were made.
    const { acquired, released, keyLeft } = await acquireThenRelease((client) =>
      client.script('FLUSH'),
    );
    expect(acquired).toEqual({ status: 'fulfilled', value: [1] });
    expect(released).toEqual({ status: 'fulfilled', value: 1 });
    expect(keyLeft).toBe(0);
  });

  it('loads every script on a new connection before its first call', async () => {
    const node = redis.nodes[2];
    const engine = await engineOn([node.url]);
    const reconnected = nextReady(engine.nodes[0].client);
    await node.restart();
    await reconnected;
    const lock = await engine.tryAcquire(unique('reloaded'));
    await lock.release();
    const errors = await admin(node.url).info('errorstats');
    expect(errors).not.toMatch(/errorstat_NOSCRIPT/);
  });
});

describe('a grant read again after a resend', () => {
  it('without its fencing token does not count, and says why instead of reporting an overflow', async () => {
    const node = redis.nodes[1];
    const proxy = await FaultProxy.start(node.port);
    // A client of the user's: ioredis re-sends a command whose reply was lost to a reconnect.
    const client = new Redis(proxy.url);
    clients.push(client);
    try {
      const engine = await engineOn([client], { fenceCounter: 'resource', ttl: 10_000 });
      // The node knows the scripts, so the trapped request is the acquisition by SHA.
      await (await engine.tryAcquire(unique('warm-up'))).release();
      const resource = unique('resent');
      const key = keyOf(resource);
      const checker = admin(node.url);
      const trapped = proxy.trap([ACQUIRE.sha, key], 'replies');
      const attempt = engine.tryAcquire(resource).catch((e: unknown) => e);
      const link = await trapped;
      // The first copy ran; its reply is held. The counter goes before the copy is re-sent.
      while ((await checker.exists(key)) === 0);
      await checker.del(`${key}:fence`);
      link.sever();
      const error = await attempt;
      expect(error).toBeInstanceOf(LockUnavailableError);
      expect((error as Error).message).toContain('without a fencing token');
      expect((error as Error).message).not.toContain('2^53');
    } finally {
      await proxy.close();
    }
  });
});

describe('line order between processes whose clocks disagree', () => {
  it('ranks a waiter whose process clock runs 5 s behind by when it really began to wait', async () => {
    const urls = redis.nodes.map((n) => n.url);
    const [holder, early] = await Promise.all([engineOn(urls), engineOn(urls)]);
    const resource = unique('skewed');
    const held = await holder.tryAcquire(resource);
    const order: string[] = [];
    const lined = nextLockEvent(early, 'contended', resource, 2);
    const first = early.acquire(resource).then((lock) => {
      order.push('early');
      return lock.release();
    });
    await lined;
    // A process whose wall clock is 5 s behind: it connects and begins to wait after the other.
    const real = Object.getOwnPropertyDescriptor(Object.getPrototypeOf(performance), 'timeOrigin')!;
    const behind = performance.timeOrigin - 5000;
    Object.defineProperty(performance, 'timeOrigin', { value: behind, configurable: true });
    let second: Promise<unknown>;
    let skewed: LockEngine;
    try {
      skewed = await engineOn(urls);
      const lined2 = nextLockEvent(skewed, 'contended', resource, 2);
      second = skewed.acquire(resource).then((lock) => {
        order.push('late');
        return lock.release();
      });
      await lined2;
    } finally {
      delete (performance as { timeOrigin?: number }).timeOrigin;
      expect(
        Object.getOwnPropertyDescriptor(Object.getPrototypeOf(performance), 'timeOrigin'),
      ).toEqual(real);
    }
    await held.release();
    await Promise.all([first, second]);
    expect(order).toEqual(['early', 'late']);
  });
});

describe('round timing', () => {
  it('times a node from when its commands leave, not from when the call was made', async () => {
    const engine = await engineOn([redis.nodes[1].url], { ttl: 1000, nodeTimeout: 50 });
    const resource = unique('blocked-loop');
    const acquiring = engine.tryAcquire(resource);
    // The event loop is blocked past the node timeout before the commands can leave.
    const until = performance.now() + 150;
    while (performance.now() < until);
    const lock: Lock = await acquiring;
    expect(lock.isHeld).toBe(true);
    await lock.release();
  });
});
