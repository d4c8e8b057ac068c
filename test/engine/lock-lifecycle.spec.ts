/**
 * The engine in production: shutting down with locks in flight, an outage
 * that is not contention, and the messages and results an operator reads.
 * Real redis-server processes throughout.
 */
import { afterAll, describe, expect, it } from '@jest/globals';
import { once } from 'node:events';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import {
  LockClosingError,
  LockEngine,
  LockLostError,
  LockOptionsError,
  LockTimeoutError,
  LockUnavailableError,
  type LockEngineOptions,
  type ReleaseResult,
} from '../../lib/engine/index.js';
import { quietLogger } from '../support/quiet-logger.js';
import { startRedisNodes, stopRedisNodes } from '../../dev/redis/redis-nodes.js';
import { engineReady } from '../support/engine-ready.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';

const redis = useRedisNodes(3);
const unique = (name: string) => `${name}:${randomUUID()}`;
const keyOf = (resource: string) => `lock:{${resource}}`;

const engines: LockEngine[] = [];
async function engineOn(options: Partial<LockEngineOptions> = {}): Promise<LockEngine> {
  const engine = new LockEngine({
    nodes: redis.nodes.map((n) => n.url),
    logger: quietLogger(),
    ...options,
  });
  engines.push(engine);
  await engine.connect();
  // connect() gives up waiting after 2 s and leaves the clients connecting: on a machine loaded
  // by the rest of the suite, the first call would find no node ready.
  await engineReady(engine);
  return engine;
}
afterAll(() => Promise.all(engines.map((e) => e.close({ timeout: 0 }))));

/** Runs `body` with an engine on `up` and `count` more nodes, killed once it has connected. */
async function withKilledNodes(
  count: number,
  up: readonly string[],
  body: (engine: LockEngine) => Promise<void>,
): Promise<void> {
  const down = await startRedisNodes(count);
  const engine = new LockEngine({
    nodes: [...up, ...down.map((n) => n.url)],
    logger: quietLogger(),
    checkNodes: false,
  });
  engines.push(engine);
  try {
    await engine.connect();
    await Promise.all(down.map((n) => n.kill()));
    await body(engine);
  } finally {
    await stopRedisNodes(down);
  }
}

async function keysOnNodes(resource: string): Promise<number> {
  const clients = redis.nodes.map((n) => new Redis(n.url));
  try {
    const found = await Promise.all(clients.map((c) => c.exists(keyOf(resource))));
    return found.reduce((sum, n) => sum + n, 0);
  } finally {
    clients.forEach((c) => c.disconnect());
  }
}

describe('close(): a graceful shutdown', () => {
  it('waits for the routine in flight, extending its lease, then releases it on every node and closes', async () => {
    // A lease no stall of a loaded machine outlasts between two extensions.
    const engine = await engineOn({ ttl: 1000 });
    const resource = unique('in-flight');
    let extensions = 0;
    engine.on('extended', () => extensions++);
    let routineDone = false;
    const started = new Promise<void>((resolve) => {
      void engine.using(resource, async () => {
        resolve();
        // Longer than the lease: only extension keeps it.
        await once(engine, 'extended');
        await once(engine, 'extended');
        routineDone = true;
      });
    });
    await started;
    await engine.close();
    expect(routineDone).toBe(true);
    expect(extensions).toBeGreaterThanOrEqual(2);
    expect(await keysOnNodes(resource)).toBe(0);
  });

  it('turns new acquisitions and waiting callers away with LockClosingError while it drains', async () => {
    const engine = await engineOn();
    const resource = unique('drain');
    const lock = await engine.acquire(resource);
    const waiting = engine.acquire(resource, { waitTimeout: 30_000 }).catch((e: unknown) => e);
    // Let the waiter reach its wait.
    await once(engine, 'contended');
    const draining = engine.drain(30_000);
    const woken = await waiting;
    expect(woken).toBeInstanceOf(LockClosingError);
    expect(woken).toBeInstanceOf(LockUnavailableError);
    await expect(engine.tryAcquire(unique('new'))).rejects.toBeInstanceOf(LockClosingError);
    // The holder still holds, and its release ends the drain.
    expect(lock.isHeld).toBe(true);
    await lock.release();
    await draining;
  });

  it('aborts the signal of a lock held past the timeout, then releases it on every node', async () => {
    const engine = await engineOn();
    const resource = unique('overstayed');
    const lock = await engine.acquire(resource);
    const aborted = once(lock.signal, 'abort');
    const started = performance.now();
    await engine.close({ timeout: 200 });
    await aborted;
    expect(performance.now() - started).toBeGreaterThanOrEqual(195);
    expect(lock.signal.reason).toBeInstanceOf(LockLostError);
    expect(await keysOnNodes(resource)).toBe(0);
  });

  it('does not wait for a lock whose lease ran out unreleased: it is lost when its lease ends', async () => {
    const engine = await engineOn();
    const lost: LockLostError[] = [];
    engine.on('lost', ({ error }) => lost.push(error));
    // Taken and never released (a holder whose work threw before its release). A 1 s lease: its
    // nodes get 100 ms to answer, which a loaded machine can take (30 ms, of a 300 ms lease, it
    // did not in a full run).
    const lock = await engine.tryAcquire(unique('abandoned'), { ttl: 1000 });
    const started = performance.now();
    await engine.close({ timeout: 10_000 });
    // Over once the lease ended, not at the shutdown timeout.
    expect(performance.now() - started).toBeLessThan(5000);
    expect(lock.isHeld).toBe(false);
    expect(lost).toHaveLength(1);
    expect(lost[0].message).toContain('its lease ran out before it was extended');
    expect(lost[0].message).not.toContain('shut down');
  });

  it('sends the clean-up of an attempt that just failed before closing the connections', async () => {
    const resource = unique('partial');
    await withKilledNodes(2, [redis.nodes[0].url], async (engine) => {
      // Granted by the one node that is up, short of a quorum of three.
      await expect(engine.tryAcquire(resource)).rejects.toBeInstanceOf(LockUnavailableError);
      await engine.close();
    });
    expect(await keysOnNodes(resource)).toBe(0);
  });

  it('closes at once with timeout 0, releasing what is still held', async () => {
    const engine = await engineOn();
    const resource = unique('at-once');
    await engine.acquire(resource);
    const started = performance.now();
    await engine.close({ timeout: 0 });
    expect(performance.now() - started).toBeLessThan(1000);
    expect(await keysOnNodes(resource)).toBe(0);
  });
});

describe('an outage is not contention', () => {
  it('gives up after unavailableTimeout when every node is down, however long waitTimeout is', async () => {
    await withKilledNodes(3, [], async (engine) => {
      const started = performance.now();
      const error = await engine.acquire(unique('outage')).catch((e: unknown) => e);
      const took = performance.now() - started;
      expect(error).toBeInstanceOf(LockUnavailableError);
      expect(took).toBeGreaterThanOrEqual(950);
      expect(took).toBeLessThan(3000);
      // Every node's outcome is reported, not just enough of them to rule out a quorum.
      expect((error as LockUnavailableError).failures).toHaveLength(3);
      expect((error as Error).message).toContain('but 3 failed');
    });
  });

  it('waits the whole waitTimeout for a busy lock', async () => {
    const engine = await engineOn({ unavailableTimeout: 100 });
    const resource = unique('busy');
    const lock = await engine.acquire(resource);
    const started = performance.now();
    await expect(engine.acquire(resource, { waitTimeout: 600 })).rejects.toBeInstanceOf(
      LockTimeoutError,
    );
    expect(performance.now() - started).toBeGreaterThanOrEqual(595);
    await lock.release();
  });
});

describe('what an operator reads', () => {
  it('says what to write when nodes is one comma-separated string', () => {
    expect(
      () => new LockEngine({ nodes: 'redis://a:6379,redis://b:6379' as unknown as string[] }),
    ).toThrow(
      new LockOptionsError(
        `nodes must be an array with one entry per Redis node, not one string (got 'redis://a:6379,redis://b:6379'). ` +
          `Write nodes: ["redis://a:6379","redis://b:6379"], or split a comma-separated setting: nodes: value.split(',').`,
      ),
    );
  });

  it('reports the nodes a release did not wait for as pending, not as misses', async () => {
    const engine = await engineOn();
    const resource = unique('pending');
    const lock = await engine.acquire(resource);
    const result = await lock.release();
    expect(result.released).toBe(true);
    expect(result.failures).toEqual([]);
    expect(result.nodesReleased + result.nodesPending).toBe(3);
    // The release reached the nodes it did not wait for too.
    expect(await keysOnNodes(resource)).toBe(0);
  });

  it('folds repeated warnings about one node: one line, then a count', async () => {
    const [node] = await startRedisNodes(1);
    const logger = quietLogger();
    const engine = new LockEngine({
      nodes: [...redis.nodes.slice(0, 2).map((n) => n.url), node.url],
      logger,
    });
    engines.push(engine);
    try {
      await engine.connect();
      await node.kill();
      for (let i = 0; i < 20; i++) await (await engine.acquire(unique('fold'))).release();
      const about = logger.warnings.filter((w) => w.includes(`node 127.0.0.1:${node.port}`));
      expect(about).toHaveLength(1);
      expect(about[0]).toMatch(/^Release of .* did not reach node 127\.0\.0\.1:\d+; /);
    } finally {
      await stopRedisNodes([node]);
    }
  });

  it('reports a using() lock lost once its lease ran out during a stall, before its routine read the signal, which then carries that reason', async () => {
    const engine = await engineOn({ ttl: 300 });
    const lost: LockLostError[] = [];
    engine.on('lost', ({ error }) => lost.push(error));
    const signal = await engine.using(unique('stalled'), async (lock) => {
      // Stalled past the whole lease (no extension can run), then back to the event loop.
      const until = performance.now() + 450;
      while (performance.now() < until);
      await new Promise((resolve) => setTimeout(resolve, 20));
      return lock.signal;
    });
    // Reported by the lease's own timer as soon as the loop ran again, not only by the release.
    expect(lost).toHaveLength(1);
    expect(lost[0].message).toContain('its lease ran out before it was extended');
    // A signal first read after the loss carries the same reason.
    expect(signal.aborted).toBe(true);
    expect(signal.reason).toBe(lost[0]);
  });

  it('aborts the signal of a lock first read after its lease ran out, at once', async () => {
    const engine = await engineOn();
    const lock = await engine.acquire(unique('read-late'), { ttl: 100 });
    // Nothing to await: the lease ends by the clock alone while nobody watches it.
    await new Promise((resolve) => setTimeout(resolve, lock.remainingTime + 20));
    const { signal } = lock;
    expect(signal.aborted).toBe(true);
    expect(signal.reason).toBeInstanceOf(LockLostError);
    expect((signal.reason as Error).message).toContain('its lease ran out before it was extended');
  });

  it('tells using() callers what the final release found', async () => {
    const engine = await engineOn();
    const results: ReleaseResult[] = [];
    const value = await engine.using(unique('observed'), () => 42, {
      onReleased: (result) => results.push(result),
    });
    expect(value).toBe(42);
    expect(results).toEqual([expect.objectContaining({ released: true, failures: [] })]);
  });
});
