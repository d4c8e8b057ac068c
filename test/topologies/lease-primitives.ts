/**
 * Read-write locks and semaphores on one node of a given topology (a Redis
 * Cluster, a Sentinel-managed master), taken by two engines: readers share,
 * a writer waits for them; N permits in distinct slots, the next caller
 * waits for one. Each waiter asks every 5 s at most, so a hand-off within
 * 3 s is a wake-up by the other engine's release message through that
 * topology's pub/sub (sharded on a cluster).
 */
import { expect } from '@jest/globals';
import { randomUUID } from 'node:crypto';
import type { LockEngine } from '../../lib/engine/index.js';
import { readWriteLock, semaphore } from '../../lib/engine/lease-parts.js';
import { nextLockEvent } from '../support/lock-events.js';

const SLOW_POLLING = { delay: 5000, factor: 1, maxDelay: 5000, jitter: 0 };
const WOKEN_WITHIN = 3000;

export async function readWriteLocksAndSemaphores(
  engine: LockEngine,
  other: LockEngine,
): Promise<void> {
  const name = `catalogue:${randomUUID()}`;
  const first = await readWriteLock(engine, name).acquire('read');
  const second = await readWriteLock(other, name).acquire('read');
  const inLine = nextLockEvent(other, 'contended', name);
  const writing = readWriteLock(other, name).acquire('write', { retry: SLOW_POLLING });
  await inLine;
  await second.release();
  const lastRead = performance.now();
  await first.release();
  const write = await writing;
  expect(performance.now() - lastRead).toBeLessThan(WOKEN_WITHIN);
  expect(write.token!).toBeGreaterThan(Math.max(first.token!, second.token!));
  await write.release();

  const payments = `payments:${randomUUID()}`;
  const p1 = await semaphore(engine, payments, 2).acquire();
  const p2 = await semaphore(other, payments, 2).acquire();
  expect(new Set([p1.slot, p2.slot])).toEqual(new Set([1, 2]));
  const waiting = nextLockEvent(other, 'contended', payments);
  const third = semaphore(other, payments, 2).acquire({ retry: SLOW_POLLING });
  await waiting;
  const freed = performance.now();
  await p1.release();
  const p3 = await third;
  expect(performance.now() - freed).toBeLessThan(WOKEN_WITHIN);
  expect(p3.slot).toBe(p1.slot);
  expect(p3.token!).toBeGreaterThan(Math.max(p1.token!, p2.token!));
  await Promise.all([p2.release(), p3.release()]);
}
