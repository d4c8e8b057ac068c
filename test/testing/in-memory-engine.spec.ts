/**
 * The in-memory engine on the clock a test controls: with Jest's fake timers,
 * leases, extensions and waiting move only when the test advances time, and
 * the hooks set up what a test means to check.
 */
import { afterEach, beforeEach, describe, expect, it, jest } from '@jest/globals';
import {
  LockBusyError,
  LockLostError,
  LockOptionsError,
  LockTimeoutError,
  LockUnavailableError,
  type Lock,
} from '../../lib/engine/index.js';
import { InMemoryLockEngine } from '../../lib/testing/index.js';

describe('InMemoryLockEngine under fake timers', () => {
  let locks: InMemoryLockEngine;

  beforeEach(() => {
    jest.useFakeTimers();
    locks = new InMemoryLockEngine({ logger: { warn: () => undefined, error: () => undefined } });
  });

  afterEach(async () => {
    await locks.close();
    jest.useRealTimers();
  });

  it('a lease ends when the test clock passes it, not before', async () => {
    const first = await locks.acquire('order:1', { ttl: 1_000 });
    const { signal } = first;

    jest.advanceTimersByTime(999);
    const busy = (await locks.tryAcquire('order:1').catch((e: unknown) => e)) as LockBusyError;
    expect(busy).toBeInstanceOf(LockBusyError);
    expect(busy.retryAfter).toBe(1);
    // The holder's own validity ends earlier, by the engine's clock-drift margin.
    expect(first.isHeld).toBe(false);
    expect(signal.aborted).toBe(true);
    expect(signal.reason).toBeInstanceOf(LockLostError);

    jest.advanceTimersByTime(1);
    const second = await locks.tryAcquire('order:1');
    expect(second.token).toBeGreaterThan(first.token!);
  });

  it('using() extends the lease for as long as the routine runs, however far the clock moves', async () => {
    let finish!: () => void;
    const routineDone = new Promise<void>((resolve) => (finish = resolve));
    let held: Lock | undefined;
    const running = locks.using(
      'report:daily',
      async (lock) => {
        held = lock;
        await routineDone;
        return lock.token;
      },
      { ttl: 1_000 },
    );
    await jest.advanceTimersByTimeAsync(10_000);
    expect(held?.isHeld).toBe(true);
    await expect(locks.tryAcquire('report:daily')).rejects.toBeInstanceOf(LockBusyError);
    finish();
    expect(await running).toBe(held!.token);
    expect(locks.isLocked('report:daily')).toBe(false);
    expect(locks.grants('report:daily')).toHaveLength(1);
  });

  it('a waiter gives up with LockTimeoutError when its waitTimeout passes on the test clock', async () => {
    locks.hold('stock:7', { ttl: 60_000 });
    const waiting = locks.acquire('stock:7', { waitTimeout: 2_000 }).catch((e: unknown) => e);
    await jest.advanceTimersByTimeAsync(1_999);
    expect(locks.isLocked('stock:7')).toBe(true);
    await jest.advanceTimersByTimeAsync(1);
    const error = (await waiting) as LockTimeoutError;
    expect(error).toBeInstanceOf(LockTimeoutError);
    expect(error.waited).toBe(2_000);
    expect(error.retryAfter).toBe(58_000);
  });

  it('a waiter gets the resource as soon as a foreign holder’s lease ends, with the next token', async () => {
    const other = locks.hold('stock:8', { ttl: 500 });
    const waiting = locks.acquire('stock:8');
    await jest.advanceTimersByTimeAsync(501);
    const lock = await waiting;
    expect(lock.token).toBeGreaterThan(other.token!);
    expect(locks.grants('stock:8').map((grant) => grant.by)).toEqual(['elsewhere', 'engine']);
  });

  it('a foreign holder that releases hands the resource to the first waiter at once', async () => {
    const other = locks.hold('stock:9', { ttl: 60_000 });
    const order: string[] = [];
    const a = locks.acquire('stock:9').then((lock) => (order.push('a'), lock));
    const b = locks.acquire('stock:9').then((lock) => (order.push('b'), lock));
    await jest.advanceTimersByTimeAsync(0);
    other.release();
    const first = await a;
    expect(order).toEqual(['a']);
    await first.release();
    await b;
    expect(order).toEqual(['a', 'b']);
  });

  it('expire() ends a lease now: the holder’s signal aborts with LockLostError and the lost event fires', async () => {
    const lost: string[] = [];
    locks.on('lost', ({ lock }) => lost.push(lock.resources[0]!));
    const lock = await locks.acquire('cart:3');
    locks.expire('cart:3');
    expect(lock.signal.reason).toBeInstanceOf(LockLostError);
    expect(lost).toEqual(['cart:3']);
    await expect(lock.extend()).rejects.toBeInstanceOf(LockLostError);
    expect((await lock.release()).released).toBe(false);
    expect(locks.isLocked('cart:3')).toBe(false);
  });

  it('failNodes() takes the quorum away until restoreNodes()', async () => {
    const three = new InMemoryLockEngine({ nodes: 3 });
    three.failNodes(0, 1);
    const error = (await three.tryAcquire('a').catch((e: unknown) => e)) as LockUnavailableError;
    expect(error).toBeInstanceOf(LockUnavailableError);
    expect(error.failures.map((f) => f.node)).toEqual(['memory-1', 'memory-2']);
    expect((await three.health()).quorum).toBe(false);
    three.restoreNodes(1);
    await expect(three.tryAcquire('a')).resolves.toBeDefined();
    expect(() => three.failNodes(3)).toThrow(
      new LockOptionsError('There is no node 3: the engine simulates 3 (indexes 0 to 2).'),
    );
  });

  it('grants() says what was locked with which token; reset() starts over', async () => {
    const one = await locks.acquire(['a', 'b']);
    await one.release();
    const two = await locks.acquire('a');
    expect(locks.grants()).toEqual([
      expect.objectContaining({ resources: ['a', 'b'], tokens: one.tokens, by: 'engine' }),
      expect.objectContaining({ resources: ['a'], token: two.token, by: 'engine' }),
    ]);
    locks.reset();
    expect(locks.grants()).toEqual([]);
    expect(locks.isLocked('a')).toBe(false);
  });

  it('hold() refuses a resource that is already held, saying what to do', async () => {
    await locks.acquire('busy');
    expect(() => locks.hold('busy')).toThrow('release or expire() it first');
  });
});
