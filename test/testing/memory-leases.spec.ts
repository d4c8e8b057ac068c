/**
 * The in-memory engine's read-write locks and semaphores: the semantics of
 * the real ones on Jest's fake clock, without Redis.
 */
import { afterEach, beforeEach, describe, expect, it, jest } from '@jest/globals';
import {
  LockBusyError,
  LockLostError,
  LockOptionsError,
  LockTimeoutError,
  LockUnavailableError,
  Permit,
  ReadWriteHold,
} from '../../lib/engine/index.js';
import { InMemoryLockEngine } from '../../lib/testing/index.js';

let locks: InMemoryLockEngine;

beforeEach(() => {
  jest.useFakeTimers();
  locks = new InMemoryLockEngine({
    nodes: 3,
    logger: { warn: () => undefined, error: () => undefined },
  });
});
afterEach(() => {
  jest.useRealTimers();
});

/** Settles whatever the fake clock has made ready. */
const flush = () => jest.advanceTimersByTimeAsync(0);

describe('in-memory read-write locks', () => {
  it('lets readers share, keeps a writer out until the last reader is gone, and fences writes', async () => {
    const rw = locks.readWriteLock('catalogue');
    const first = await rw.acquire('read');
    const second = await rw.tryAcquire('read');
    expect(first).toBeInstanceOf(ReadWriteHold);
    expect([first.mode, second.mode]).toEqual(['read', 'read']);
    await expect(rw.tryAcquire('write')).rejects.toBeInstanceOf(LockBusyError);
    await expect(rw.tryAcquire('write')).rejects.toThrow(/held by readers or a writer/);

    let writer: ReadWriteHold | undefined;
    const writing = rw.acquire('write').then((hold) => (writer = hold));
    await first.release();
    await flush();
    expect(writer).toBeUndefined();
    await second.release();
    await writing;
    // A write counts a token; a read carries the last write's.
    expect(writer!.token).toBe(first.token! + 1);
    await writer!.release();
    const reader = await rw.tryAcquire('read');
    expect(reader.token).toBe(writer!.token);
    await reader.release();
  });

  it('serves the line in order: a reader that comes after a waiting writer waits behind it', async () => {
    const rw = locks.readWriteLock('catalogue');
    const reading = await rw.acquire('read');
    const order: string[] = [];
    const writer = rw.acquire('write').then(async (hold) => {
      order.push('writer');
      await hold.release();
    });
    await flush();
    // A reader could share with the one holding, but a writer waits ahead of it.
    await expect(rw.tryAcquire('read')).rejects.toThrow(/a writer waits ahead/);
    const readers = [1, 2].map((n) =>
      rw.acquire('read').then(async (hold) => {
        order.push(`reader ${n}`);
        await flush();
        await hold.release();
      }),
    );
    await flush();
    await reading.release();
    await Promise.all([writer, ...readers]);
    expect(order).toEqual(['writer', 'reader 1', 'reader 2']);
  });

  it('ends an unextended lease on the fake clock, and using() extends one past its ttl', async () => {
    const rw = locks.readWriteLock('catalogue');
    const stale = await rw.acquire('write', { ttl: 100 });
    await jest.advanceTimersByTimeAsync(150);
    expect(stale.isHeld).toBe(false);
    await expect(stale.extend()).rejects.toBeInstanceOf(LockLostError);
    const result = rw.using(
      'write',
      async (hold) => {
        await new Promise((resolve) => setTimeout(resolve, 1000));
        return hold.isHeld;
      },
      { ttl: 200 },
    );
    await jest.advanceTimersByTimeAsync(1000);
    await expect(result).resolves.toBe(true);
    await expect(rw.tryAcquire('write')).resolves.toBeInstanceOf(ReadWriteHold);
  });

  it('times out a wait, fails while too few nodes answer, and refuses a wrong mode', async () => {
    const rw = locks.readWriteLock('catalogue');
    const held = await rw.acquire('write', { ttl: 60_000 });
    const waiting = rw.acquire('read', { waitTimeout: 500 });
    const failed = expect(waiting).rejects.toBeInstanceOf(LockTimeoutError);
    await jest.advanceTimersByTimeAsync(600);
    await failed;
    locks.failNodes(0, 1);
    await expect(rw.tryAcquire('read')).rejects.toBeInstanceOf(LockUnavailableError);
    await expect(held.extend()).rejects.toBeInstanceOf(LockUnavailableError);
    locks.restoreNodes();
    await expect(rw.acquire('upgrade' as 'read')).rejects.toBeInstanceOf(LockOptionsError);
  });

  it('inspects and force-releases like the real one', async () => {
    const rw = locks.readWriteLock('catalogue');
    const [a, b] = [await rw.acquire('read'), await rw.acquire('read')];
    const seen = await rw.inspect();
    expect(seen).toMatchObject({ kind: 'read-write', verdict: 'held', mode: 'read' });
    expect(seen.holders.map((h) => h.value).sort()).toEqual([a.value, b.value].sort());
    expect(await rw.forceRelease(a.value)).toBe(3);
    await expect(a.extend()).rejects.toBeInstanceOf(LockLostError);
    expect(await rw.forceRelease()).toBe(3);
    expect((await rw.inspect()).verdict).toBe('free');
  });
});

describe('in-memory semaphores', () => {
  it('hands out N permits in the lowest free slots, refuses the next, and wakes a waiter on release', async () => {
    const payments = locks.semaphore('payments', 2);
    const one = await payments.acquire();
    const two = await payments.tryAcquire();
    expect(one).toBeInstanceOf(Permit);
    expect([one.slot, two.slot]).toEqual([1, 2]);
    expect(two.token).toBeGreaterThan(one.token!);
    await expect(payments.tryAcquire()).rejects.toThrow(/All 2 permits of 'payments' are held/);
    const waiting = payments.acquire();
    await flush();
    await one.release();
    const three = await waiting;
    expect(three.slot).toBe(1);
    expect(three.token).toBeGreaterThan(two.token!);
    // Raised N admits more at once; the nodes keep no N.
    const more = await locks.semaphore('payments', 3).tryAcquire();
    expect(more.slot).toBe(3);
    await Promise.all([two, three, more].map((permit) => permit.release()));
    expect((await payments.inspect()).verdict).toBe('free');
  });

  it('using() holds a permit while the routine runs, and says what to change for a wrong N', async () => {
    const payments = locks.semaphore('payments', 1);
    const running = payments.using(async (permit) => {
      await expect(locks.semaphore('payments', 1).tryAcquire()).rejects.toBeInstanceOf(
        LockBusyError,
      );
      return permit.slot;
    });
    await expect(running).resolves.toBe(1);
    await expect(payments.tryAcquire()).resolves.toBeInstanceOf(Permit);
    expect(() => locks.semaphore('payments', 0)).toThrow(/whole number of permits from 1/);
  });

  it('reset() forgets the holders and the counters', async () => {
    const payments = locks.semaphore('payments', 1);
    await payments.acquire();
    locks.reset();
    const again = await payments.tryAcquire();
    expect(again.token).toBe(1);
  });
});
