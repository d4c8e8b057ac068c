import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import {
  LockAbortedError,
  LockEngine,
  LockTimeoutError,
  type Lock,
} from '../../lib/engine/index.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';
import { quietLogger } from '../support/quiet-logger.js';

const redis = useRedisNodes(3);
const unique = (name: string) => `${name}:${randomUUID()}`;
/** A retry delay so long that only a wake-up can explain a fast hand-off. */
const SLOW_POLLING = { delay: 5000, factor: 1, maxDelay: 5000, jitter: 0 };

describe('waiters are woken when a lock is released', () => {
  const engines: LockEngine[] = [];
  const engine = async (options: { releaseNotifications?: boolean } = {}) => {
    const created = new LockEngine({
      nodes: redis.nodes.map((n) => n.url),
      logger: quietLogger(),
      ...options,
    });
    await created.connect();
    engines.push(created);
    return created;
  };
  let holder: LockEngine;
  beforeAll(async () => {
    holder = await engine();
  });
  afterAll(async () => {
    await Promise.all(engines.map((e) => e.close()));
  });

  it('wakes a waiter of another process (engine) through the release message', async () => {
    const waiter = await engine();
    const resource = unique('remote');
    const lock = await holder.acquire(resource);
    const contended = new Promise<void>((resolve) => waiter.once('contended', () => resolve()));
    const waiting = waiter.acquire(resource, { retry: SLOW_POLLING });
    await contended;
    const released = performance.now();
    await lock.release();
    const next = await waiting;
    expect(performance.now() - released).toBeLessThan(1000);
    await next.release();
  });

  it('without release notifications the same waiter sleeps its retry delay (the control)', async () => {
    const silentHolder = await engine({ releaseNotifications: false });
    const waiter = await engine({ releaseNotifications: false });
    const resource = unique('silent');
    const lock = await silentHolder.acquire(resource);
    const contended = new Promise<void>((resolve) => waiter.once('contended', () => resolve()));
    const waiting = waiter.acquire(resource, {
      retry: { ...SLOW_POLLING, delay: 1500, maxDelay: 1500 },
    });
    await contended;
    const released = performance.now();
    await lock.release();
    const next = await waiting;
    expect(performance.now() - released).toBeGreaterThan(1000);
    await next.release();
  });

  it('hands the lock to this process’s waiters first come, first served', async () => {
    const resource = unique('fifo');
    const first = await holder.acquire(resource);
    const order: number[] = [];
    const take = (i: number) =>
      holder.acquire(resource, { retry: SLOW_POLLING }).then(async (lock: Lock) => {
        order.push(i);
        await lock.release();
      });
    const contended = new Promise<void>((resolve) => holder.once('contended', () => resolve()));
    const waiters = [take(0)];
    await contended;
    // The others find the line already formed and join it in the order they ask.
    for (let i = 1; i < 5; i++) waiters.push(take(i));
    const started = performance.now();
    await first.release();
    await Promise.all(waiters);
    expect(order).toEqual([0, 1, 2, 3, 4]);
    expect(performance.now() - started).toBeLessThan(2000);
  });

  it('moves the line on when the first waiter gives up or is aborted', async () => {
    const resource = unique('give-up');
    const lock = await holder.acquire(resource);
    const controller = new AbortController();
    const aborted = holder.acquire(resource, { signal: controller.signal, retry: SLOW_POLLING });
    await new Promise<void>((resolve) => holder.once('contended', () => resolve()));
    const impatient = holder.acquire(resource, { waitTimeout: 200, retry: SLOW_POLLING });
    const patient = holder.acquire(resource, { retry: SLOW_POLLING });
    controller.abort();
    await expect(aborted).rejects.toBeInstanceOf(LockAbortedError);
    await expect(impatient).rejects.toBeInstanceOf(LockTimeoutError);
    const started = performance.now();
    await lock.release();
    const next = await patient;
    expect(performance.now() - started).toBeLessThan(1000);
    await next.release();
  });

  it('closes its subscriber connections when the engine closes', async () => {
    const admin = new Redis(redis.nodes[0].url);
    const clients = async () => ((await admin.client('LIST')) as string).trim().split('\n').length;
    const before = await clients();
    const waiter = new LockEngine({ nodes: redis.nodes.map((n) => n.url), logger: quietLogger() });
    await waiter.connect();
    const resource = unique('subscribers');
    const lock = await holder.acquire(resource);
    const waiting = waiter.acquire(resource);
    await new Promise<void>((resolve) => waiter.once('contended', () => resolve()));
    await lock.release();
    await (await waiting).release();
    // Its own connection, and the subscriber it opened to wait.
    expect(await clients()).toBe(before + 2);
    await waiter.close();
    expect(await clients()).toBe(before);
    await admin.quit();
  });
});
