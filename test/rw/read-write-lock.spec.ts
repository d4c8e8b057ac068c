import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import {
  LockBusyError,
  LockEngine,
  LockLostError,
  LockOptionsError,
} from '../../lib/engine/index.js';
import type { ReadWriteHold } from '../../lib/engine/read-write-lock.js';
import { readWriteLock } from '../../lib/engine/lease-parts.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';
import { quietLogger } from '../support/quiet-logger.js';

const redis = useRedisNodes(3);
const unique = (name: string) => `${name}:${randomUUID()}`;
/** Long enough that only a wake-up explains a quick hand-off. */
const SLOW_POLLING = { delay: 3000, factor: 1, maxDelay: 3000, jitter: 0 };

describe('read-write locks', () => {
  const engines: LockEngine[] = [];
  const engine = async (options: { fenceCounter?: 'node' | 'resource' } = {}) => {
    const created = new LockEngine({
      nodes: redis.nodes.map((n) => n.url),
      logger: quietLogger(),
      ...options,
    });
    await created.connect();
    engines.push(created);
    return created;
  };
  let a: LockEngine;
  let b: LockEngine;
  beforeAll(async () => {
    a = await engine();
    b = await engine({ fenceCounter: 'resource' });
  });
  afterAll(async () => {
    await Promise.all(engines.map((e) => e.close({ timeout: 0 })));
  });

  it('lets readers share and keeps a writer out until the last reader is gone', async () => {
    const name = unique('shared');
    const r1 = await readWriteLock(a, name).acquire('read');
    const r2 = await readWriteLock(b, name).acquire('read');
    expect(r1.mode).toBe('read');
    await expect(readWriteLock(a, name).tryAcquire('write')).rejects.toBeInstanceOf(LockBusyError);
    await r1.release();
    await expect(readWriteLock(b, name).tryAcquire('write')).rejects.toBeInstanceOf(LockBusyError);
    await r2.release();
    const w = await readWriteLock(b, name).tryAcquire('write');
    await expect(readWriteLock(a, name).tryAcquire('read')).rejects.toBeInstanceOf(LockBusyError);
    await w.release();
  });

  it("gives a writer a token above every earlier one, and a reader the last write's", async () => {
    const name = unique('tokens');
    const rw = readWriteLock(b, name);
    const w1 = await rw.acquire('write');
    await w1.release();
    const r1 = await rw.acquire('read');
    const r2 = await rw.acquire('read');
    expect(r1.token).toBe(w1.token);
    expect(r2.token).toBe(w1.token);
    await Promise.all([r1.release(), r2.release()]);
    const w2 = await rw.acquire('write');
    expect(w2.token!).toBeGreaterThan(r1.token!);
    await w2.release();
  });

  it('serves a waiting writer before readers that came after it, and wakes it on the last release', async () => {
    const name = unique('fair');
    const order: string[] = [];
    const reader = await readWriteLock(a, name).acquire('read');
    const writer = readWriteLock(b, name)
      .acquire('write', { retry: SLOW_POLLING })
      .then((hold) => {
        order.push('writer');
        return hold;
      });
    // The writer is in the nodes' line once its second attempt was refused.
    await waitForLine(name, 'w');
    const late = readWriteLock(a, name)
      .acquire('read', { retry: SLOW_POLLING })
      .then((hold) => {
        order.push('late reader');
        return hold;
      });
    await waitForLine(name, 'r');
    const started = performance.now();
    await reader.release();
    const held = await writer;
    expect(performance.now() - started).toBeLessThan(1500);
    expect(order).toEqual(['writer']);
    await held.release();
    await (await late).release();
    expect(order).toEqual(['writer', 'late reader']);
  });

  it("keeps a crashed reader's lease only until it ends", async () => {
    const name = unique('crashed');
    // Never released nor extended: a process that died.
    await readWriteLock(a, name).acquire('read', { ttl: 300 });
    const started = performance.now();
    const w = await readWriteLock(b, name).acquire('write', { waitTimeout: 3000 });
    expect(performance.now() - started).toBeLessThan(1500);
    await w.release();
  });

  it('extends each reader on its own: one reader renewed, the other lost', async () => {
    const name = unique('extend');
    const rw = readWriteLock(a, name);
    const kept = await rw.acquire('read', { ttl: 1000 });
    const dropped = await rw.acquire('read', { ttl: 1000 });
    await dropped.release();
    await expect(dropped.extend()).rejects.toBeInstanceOf(LockLostError);
    await kept.extend(2000);
    expect(kept.remainingTime).toBeGreaterThan(1000);
    await kept.release();
  });

  it('using() extends the lease past its ttl and releases', async () => {
    const name = unique('using');
    const result = await readWriteLock(a, name).using(
      'write',
      async (hold: ReadWriteHold) => {
        // Twice the lease, held by extensions alone; a lease no stall of a loaded machine
        // outlasts between two of them.
        await new Promise((resolve) => setTimeout(resolve, 2000));
        expect(hold.signal.aborted).toBe(false);
        return hold.token;
      },
      { ttl: 1000 },
    );
    expect(typeof result).toBe('number');
    const w = await readWriteLock(b, name).tryAcquire('write');
    await w.release();
  });

  it('forceRelease() drops one holder by its value, or every holder; the holders learn it at their next extension', async () => {
    const name = unique('forced');
    const [first, second] = await Promise.all(
      [a, b].map((engine) => readWriteLock(engine, name).acquire('read', { ttl: 60_000 })),
    );
    const rw = readWriteLock(a, name);
    expect(await rw.forceRelease(first.value)).toBe(3);
    expect((await rw.inspect()).holders.map((h) => h.value)).toEqual([second.value]);
    await expect(first.extend()).rejects.toBeInstanceOf(LockLostError);
    expect(await rw.forceRelease()).toBe(3);
    expect(await rw.forceRelease()).toBe(0);
    await expect(second.extend()).rejects.toBeInstanceOf(LockLostError);
    const writer = await readWriteLock(b, name).tryAcquire('write');
    await writer.release();
    await expect(rw.forceRelease('')).rejects.toThrow(
      /takes a holder's value as inspect\(\) shows it/,
    );
  });

  it('says what to change for a wrong mode or name', async () => {
    expect(() => readWriteLock(a, '')).toThrow(LockOptionsError);
    await expect(readWriteLock(a, 'x').acquire('upgrade' as 'read')).rejects.toThrow(
      /'read' or 'write'/,
    );
  });
});

/** Resolves once some node's line for `name` has a waiter in `mode` ('r' or 'w'). */
async function waitForLine(name: string, mode: 'r' | 'w'): Promise<void> {
  const client = new Redis(redis.nodes[0].url);
  try {
    const deadline = performance.now() + 5000;
    while (performance.now() < deadline) {
      const places = await client.hvals(`lock:{${name}}:rw:q`);
      if (places.some((p) => p.endsWith(` ${mode}`))) return;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    throw new Error(`no '${mode}' waiter joined the line of ${name}`);
  } finally {
    client.disconnect();
  }
}
