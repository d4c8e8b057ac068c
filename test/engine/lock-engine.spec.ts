import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import {
  Lock,
  LockAbortedError,
  LockBusyError,
  LockConfigurationError,
  LockEngine,
  LockLostError,
  LockOptionsError,
  LockTimeoutError,
} from '../../lib/engine/index.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';
import { nextLockEvent } from '../support/lock-events.js';
import { quietLogger } from '../support/quiet-logger.js';
import { whenLost } from '../support/when-lost.js';

const redis = useRedisNodes(5);
const unique = (name: string) => `${name}:${randomUUID()}`;

describe.each([1, 3, 5])('on %i node(s)', (count) => {
  let engine: LockEngine;
  let other: LockEngine;
  let clients: Redis[];

  beforeAll(async () => {
    const nodes = redis.nodes.slice(0, count).map((n) => n.url);
    engine = new LockEngine({ nodes, logger: quietLogger() });
    other = new LockEngine({ nodes, logger: quietLogger() });
    await Promise.all([engine.connect(), other.connect()]);
    clients = redis.nodes.slice(0, count).map((n) => new Redis(n.url));
  });
  afterAll(async () => {
    await Promise.all([engine.close(), other.close(), ...clients.map((c) => c.quit())]);
  });

  it('grants a lock, holds its key on every node, and releases it everywhere', async () => {
    const resource = unique('order');
    const lock = await engine.acquire(resource);
    expect(lock).toBeInstanceOf(Lock);
    expect(lock.resources).toEqual([resource]);
    expect(lock.isHeld).toBe(true);
    expect(lock.remainingTime).toBeGreaterThan(4000);
    expect(lock.remainingTime).toBeLessThanOrEqual(5000);
    const values = await Promise.all(clients.map((c) => c.get(`lock:{${resource}}`)));
    expect(values.filter((v) => v === lock.value).length).toBeGreaterThanOrEqual(engine.quorum);

    const result = await lock.release();
    expect(result.released).toBe(true);
    expect(result.nodesReleased).toBeGreaterThanOrEqual(engine.quorum);
    expect(lock.isHeld).toBe(false);
    expect(await lock.release()).toBe(result);
    // The lock can be had again at once.
    await (await other.tryAcquire(resource)).release();
  });

  it('refuses a held resource to a second holder with its remaining lease as retryAfter', async () => {
    const resource = unique('seat');
    const lock = await engine.acquire(resource, { ttl: 3000 });
    const busy = await other.tryAcquire(resource).catch((e: unknown) => e);
    expect(busy).toBeInstanceOf(LockBusyError);
    expect(busy).not.toBeInstanceOf(LockTimeoutError);
    const { retryAfter } = busy as LockBusyError;
    expect(retryAfter).toBeGreaterThan(2000);
    expect(retryAfter).toBeLessThanOrEqual(3000);
    expect((busy as Error).message).toContain(resource);
    await lock.release();
  });

  it('gives up waiting with LockTimeoutError when the holder keeps the lock past waitTimeout', async () => {
    const resource = unique('stock');
    const lock = await engine.acquire(resource);
    const started = performance.now();
    // Long enough for several attempts even when a loaded machine makes the first round slow
    // (a 150 ms wait on 5 nodes once ran out within its first attempt in a full run).
    const error = await other.acquire(resource, { waitTimeout: 600 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockTimeoutError);
    expect((error as LockTimeoutError).attempts).toBeGreaterThan(1);
    expect(performance.now() - started).toBeLessThan(3000);
    await lock.release();
  });

  it('reports an acquisition aborted while waiting as failed with LockAbortedError', async () => {
    const resource = unique('aborted');
    const lock = await engine.acquire(resource);
    const controller = new AbortController();
    const failed = new Promise<unknown>((resolve) =>
      other.once('failed', ({ error }) => resolve(error)),
    );
    const waiting = other.acquire(resource, { signal: controller.signal });
    await nextLockEvent(other, 'contended', resource);
    controller.abort();
    await expect(waiting).rejects.toBeInstanceOf(LockAbortedError);
    expect(await failed).toBeInstanceOf(LockAbortedError);
    await lock.release();
  });

  it('hands the lock to a waiter once the holder releases it', async () => {
    const resource = unique('cart');
    const lock = await engine.acquire(resource);
    const waiting = other.acquire(resource);
    await lock.release();
    const next = await waiting;
    expect(next.isHeld).toBe(true);
    expect(next.token).toBeGreaterThan(lock.token!);
    await next.release();
  });

  it('lets a lock expire: its signal aborts with LockLostError and another holder can take it', async () => {
    const resource = unique('expiring');
    const lock = await engine.acquire(resource, { ttl: 150 });
    await whenLost(lock);
    expect(lock.signal.reason).toBeInstanceOf(LockLostError);
    expect(lock.isHeld).toBe(false);
    const next = await other.acquire(resource);
    expect(next.token).toBeGreaterThan(lock.token!);
    // Releasing the expired lock reports it, it does not throw, and spares the new holder.
    const result = await lock.release();
    expect(result.released).toBe(false);
    // The next holder stands on a quorum, where this lock's keys are gone. A node outside it
    // may still have had this lock's key (the nodes' copies expire a few ms apart, and the next
    // grant needs only a quorum of them): the release deletes that one, never the holder's.
    expect(result.nodesReleased).toBeLessThanOrEqual(count - engine.quorum);
    expect(next.isHeld).toBe(true);
    await expect(other.tryAcquire(resource)).rejects.toBeInstanceOf(LockBusyError);
    await next.release();
  });

  it('extends a lease, keeping the token, and refuses to extend a lost lock', async () => {
    const resource = unique('extend');
    // Long enough to survive a stall of a loaded machine before the extension; short of 4 s.
    const lock = await engine.acquire(resource, { ttl: 2000 });
    const token = lock.token;
    await lock.extend(5000);
    expect(lock.remainingTime).toBeGreaterThan(4000);
    expect(lock.token).toBe(token);
    const ttls = await Promise.all(clients.map((c) => c.pttl(`lock:{${resource}}`)));
    expect(ttls.filter((t) => t > 4000).length).toBeGreaterThanOrEqual(engine.quorum);

    // Another program removes the key: extension must not re-create it.
    await Promise.all(clients.map((c) => c.del(`lock:{${resource}}`)));
    await expect(lock.extend()).rejects.toBeInstanceOf(LockLostError);
    expect(lock.signal.aborted).toBe(true);
    expect(await Promise.all(clients.map((c) => c.exists(`lock:{${resource}}`)))).toEqual(
      clients.map(() => 0),
    );
  });

  it('locks several resources all-or-nothing', async () => {
    const [a, b, c] = [unique('a'), unique('b'), unique('c')];
    const held = await engine.acquire(b);
    await expect(other.tryAcquire([a, b, c])).rejects.toBeInstanceOf(LockBusyError);
    // Nothing of the refused set was left behind.
    const leftovers = await Promise.all(
      clients.map((cl) => cl.exists(`lock:{${a}}`, `lock:{${c}}`)),
    );
    expect(leftovers).toEqual(clients.map(() => 0));
    await held.release();

    const all = await other.acquire([a, b, c, a]);
    expect(all.resources).toEqual([a, b, c]);
    expect(all.tokens).toHaveLength(3);
    await expect(engine.tryAcquire(c)).rejects.toBeInstanceOf(LockBusyError);
    await all.release();
    await (await engine.tryAcquire(c)).release();
  });

  it('runs a routine with using(), releases afterwards, and passes its error through untouched', async () => {
    const resource = unique('using');
    const result = await engine.using(resource, async (lock) => {
      expect(lock.isHeld).toBe(true);
      await expect(other.tryAcquire(resource)).rejects.toBeInstanceOf(LockBusyError);
      return 42;
    });
    expect(result).toBe(42);
    await (await other.tryAcquire(resource)).release();

    const mine = new Error('routine failed');
    await expect(
      engine.using(resource, () => {
        throw mine;
      }),
    ).rejects.toBe(mine);
    await (await other.tryAcquire(resource)).release();
  });
});

describe('using() with automatic extension', () => {
  let engine: LockEngine;
  beforeAll(async () => {
    engine = new LockEngine({
      nodes: redis.nodes.slice(0, 3).map((n) => n.url),
      logger: quietLogger(),
    });
    await engine.connect();
  });
  afterAll(() => engine.close());

  it('keeps a routine that outlives its lease covered', async () => {
    const resource = unique('long');
    const rival = new LockEngine({
      nodes: redis.nodes.slice(0, 3).map((n) => n.url),
      logger: quietLogger(),
    });
    await rival.connect();
    let extensions = 0;
    const threeExtensions = new Promise<void>((resolve) => {
      engine.on('extended', ({ lock }) => {
        if (lock.resources[0] === resource && ++extensions === 3) resolve();
      });
    });
    await engine.using(
      resource,
      async (lock) => {
        const first = lock.validUntil;
        await threeExtensions;
        expect(lock.validUntil).toBeGreaterThan(first + 200);
        expect(lock.signal.aborted).toBe(false);
        await expect(rival.tryAcquire(resource)).rejects.toBeInstanceOf(LockBusyError);
      },
      // A lease no stall of a loaded machine outlasts between two extensions: a lost one
      // would leave the test waiting for extensions that never come.
      { ttl: 1000 },
    );
    await (await rival.tryAcquire(resource)).release();
    await rival.close();
  });

  it('aborts the signal with LockLostError before the lease ends when extension fails', async () => {
    const resource = unique('doomed');
    const admin = redis.nodes.slice(0, 3).map((n) => new Redis(n.url));
    // Connected before the lease starts, so the takeover below costs one round trip.
    await Promise.all(admin.map((c) => c.ping()));
    await engine.using(
      resource,
      async (lock) => {
        // Someone else takes the keys over: the next extension finds them gone.
        await Promise.all(admin.map((c) => c.set(`lock:{${resource}}`, 'intruder', 'PX', 10_000)));
        await whenLost(lock);
        expect(lock.signal.reason).toBeInstanceOf(LockLostError);
        expect(performance.now()).toBeLessThan(lock.validUntil + 1);
      },
      // The failed extension comes half a lease before its end: 500 ms, more than a stall of
      // a loaded machine (with 300, a 190 ms stall in a full run made the abort 43 ms late).
      { ttl: 1000 },
    );
    // The release did not delete the intruder's keys.
    expect(await Promise.all(admin.map((c) => c.get(`lock:{${resource}}`)))).toEqual([
      'intruder',
      'intruder',
      'intruder',
    ]);
    await Promise.all(admin.map((c) => c.quit()));
  });
});

describe('fencing tokens', () => {
  let engine: LockEngine;
  let clients: Redis[];
  beforeAll(async () => {
    engine = new LockEngine({
      nodes: redis.nodes.slice(0, 3).map((n) => n.url),
      logger: quietLogger(),
    });
    await engine.connect();
    clients = redis.nodes.slice(0, 3).map((n) => new Redis(n.url));
  });
  afterAll(async () => {
    await engine.close();
    await Promise.all(clients.map((c) => c.quit()));
  });

  it('strictly increase over 2,000 sequential grants', async () => {
    const resource = unique('sequential');
    let previous = 0;
    let increasing = 0;
    for (let i = 0; i < 2_000; i++) {
      const lock = await engine.tryAcquire(resource);
      if (lock.token! > previous) increasing++;
      previous = lock.token!;
      await lock.release();
    }
    expect(increasing).toBe(2_000);
    expect(Number.isSafeInteger(previous)).toBe(true);
    // 4,000 round trips in a row: about 4 s on an idle machine, over 25 s once beside two
    // CPU-bound processes and other test processes. The timeout only guards against a hang.
  }, 120_000);

  it('keep the same token across extensions', async () => {
    const lock = await engine.acquire(unique('same'));
    const { token } = lock;
    await lock.extend();
    await lock.extend();
    expect(lock.token).toBe(token);
    await lock.release();
  });

  it('count on one counter per node by default, which never expires', async () => {
    const lock = await engine.tryAcquire(unique('node-counter'));
    const counters = await Promise.all(clients.map((c) => c.get('lock:fence')));
    expect(counters.filter((c) => Number(c) === lock.token).length).toBeGreaterThanOrEqual(2);
    expect(await clients[0].exists(`lock:{${lock.resources[0]}}:fence`)).toBe(0);
    expect(await clients[0].pttl('lock:fence')).toBe(-1);
    await lock.release();
  });
});

describe.each(['node', 'resource'] as const)('fencing tokens counted per %s', (fenceCounter) => {
  let engine: LockEngine;
  let clients: Redis[];
  const nodes = () => redis.nodes.slice(0, 3).map((n) => n.url);
  /** The counter a resource's tokens come from. */
  const counterOf = (resource: string) =>
    fenceCounter === 'node' ? 'lock:fence' : `lock:{${resource}}:fence`;
  beforeAll(async () => {
    engine = new LockEngine({ nodes: nodes(), fenceCounter, logger: quietLogger() });
    await engine.connect();
    clients = redis.nodes.slice(0, 3).map((n) => new Redis(n.url));
  });
  afterAll(async () => {
    await engine.close();
    await Promise.all(clients.map((c) => c.quit()));
  });

  it('are settled by a write-back round when the nodes counters disagree', async () => {
    const resource = unique('diverged');
    const fence = counterOf(resource);
    // Above anything the counters have reached, so that no test's tokens go backwards.
    const base = Math.max(...(await Promise.all(clients.map((c) => c.get(fence)))).map(Number));
    await clients[0].set(fence, base + 1000);
    await clients[1].set(fence, base + 500);
    await clients[2].set(fence, base + 200);
    const lock = await engine.tryAcquire(resource);
    const counters = (await Promise.all(clients.map((c) => c.get(fence)))).map(Number);
    // The chosen token is the highest counter among the granting nodes, and a quorum now carries it.
    expect([base + 1001, base + 501]).toContain(lock.token);
    expect(counters.filter((c) => c >= lock.token!).length).toBeGreaterThanOrEqual(2);
    await lock.release();
    const next = await engine.tryAcquire(resource);
    expect(next.token).toBeGreaterThan(lock.token!);
    await next.release();
  });

  it('start a new counter above every earlier token once the old one is gone', async () => {
    const resource = unique('reseeded');
    const fence = counterOf(resource);
    const first = await engine.tryAcquire(resource);
    await first.release();
    const lifetimes = await Promise.all(clients.map((c) => c.pttl(fence)));
    if (fenceCounter === 'resource') {
      expect(lifetimes.filter((t) => t > 0 && t <= 3_600_000).length).toBeGreaterThanOrEqual(2);
    } else {
      expect(lifetimes.filter((t) => t === -1).length).toBeGreaterThanOrEqual(2);
    }
    // What expiry (or a wiped node) does to the counters, without waiting an hour for it.
    await Promise.all(clients.map((c) => c.del(fence)));
    const second = await engine.tryAcquire(resource);
    expect(second.token).toBeGreaterThan(first.token!);
    expect(Number.isSafeInteger(second.token)).toBe(true);
    await second.release();
  });

  it('count from 1 and keep their counters forever with fenceCounterTtl: 0', async () => {
    // A key prefix of its own: the node counter of the other tests started from the clock.
    const keyPrefix = `exact-${fenceCounter}:`;
    const exact = new LockEngine({
      nodes: nodes(),
      fenceCounter,
      fenceCounterTtl: 0,
      keyPrefix,
      logger: quietLogger(),
    });
    await exact.connect();
    const resource = unique('exact');
    const tokens: number[] = [];
    for (let i = 0; i < 3; i++) {
      const lock = await exact.tryAcquire(resource);
      tokens.push(lock.token!);
      await lock.release();
    }
    expect(tokens).toEqual([1, 2, 3]);
    const counter =
      fenceCounter === 'node' ? `${keyPrefix}fence` : `${keyPrefix}{${resource}}:fence`;
    expect(await clients[0].pttl(counter)).toBe(-1);
    expect(await clients[0].get(counter)).toBe('3');
    await exact.close();
  });

  it('refuse a token past 2^53 - 1 with a LockConfigurationError, leaving no lock behind', async () => {
    const resource = unique('overflow');
    const fence = counterOf(resource);
    const saved = await Promise.all(clients.map((c) => c.get(fence)));
    await Promise.all(clients.map((c) => c.set(fence, '9007199254740991')));
    const error = await engine.tryAcquire(resource).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockConfigurationError);
    expect((error as Error).message).toContain(fence);
    await Promise.all(
      clients.map((c, i) => (saved[i] === null ? c.del(fence) : c.set(fence, saved[i]!))),
    );
    await (await engine.tryAcquire(resource)).release();
  });
});

describe('argument checks', () => {
  it('rejects bad options and resources with a LockOptionsError that says what to change', async () => {
    expect(() => new LockEngine({ nodes: [] })).toThrow(/at least one Redis node/);
    expect(() => new LockEngine({ nodes: ['http://x'] })).toThrow(LockOptionsError);
    expect(() => new LockEngine({ nodes: ['redis://localhost'], ttl: -1 })).toThrow(
      /ttl must be a whole number/,
    );
    expect(() => new LockEngine({ nodes: ['redis://localhost'], tll: 5 } as never)).toThrow(
      /no option 'tll'/,
    );
    const engine = new LockEngine({ nodes: [redis.nodes[0].url], logger: quietLogger() });
    await engine.connect();
    await expect(engine.acquire('')).rejects.toThrow(
      /resource name cannot be used: it has 0 characters, not 1 to 512/,
    );
    await expect(engine.acquire([])).rejects.toThrow(LockOptionsError);
    await expect(engine.acquire('x', { ttl: 1.5 })).rejects.toThrow(/ttl must be a whole number/);
    await expect(engine.acquire('x', { retry: { jitter: 2 } })).rejects.toThrow(/retry.jitter/);
    await engine.close();
  });
});
