/**
 * A graceful shutdown treats read-write holds and semaphore permits as it
 * treats locks: new acquisitions and waiters fail with LockClosingError, the
 * holders in flight keep their leases until they finish, and close() waits
 * for them (up to its timeout), releasing them on every node.
 */
import { describe, expect, it } from '@jest/globals';
import { randomUUID } from 'node:crypto';
import { LockClosingError, LockEngine, LockLostError } from '../../lib/engine/index.js';
import { readWriteLock, semaphore } from '../../lib/engine/lease-parts.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';
import { quietLogger } from '../support/quiet-logger.js';

const redis = useRedisNodes(3);
const unique = (name: string) => `${name}:${randomUUID()}`;

async function openEngine(): Promise<LockEngine> {
  const engine = new LockEngine({ nodes: redis.nodes.map((n) => n.url), logger: quietLogger() });
  await engine.connect();
  return engine;
}

/** Resolves once `promise` settled; tells whether it had when checked. */
function tracked<T>(promise: Promise<T>): { promise: Promise<T>; done: () => boolean } {
  let settled = false;
  const watched = promise.finally(() => (settled = true));
  return { promise: watched, done: () => settled };
}

describe('a graceful shutdown with read-write holds and permits in flight', () => {
  it('waits for the holders to finish, refuses new ones and wakes waiters with LockClosingError', async () => {
    const engine = await openEngine();
    const other = await openEngine();
    try {
      const name = unique('drain');
      const permits = semaphore(engine, name, 1);
      const rw = readWriteLock(engine, name);
      let finishPermit!: () => void;
      let finishWrite!: () => void;
      const permitHeld = new Promise<void>((entered) => {
        void permits.using(
          () =>
            new Promise<void>((resolve) => {
              finishPermit = resolve;
              entered();
            }),
        );
      });
      const writeHeld = new Promise<void>((entered) => {
        void rw.using(
          'write',
          () =>
            new Promise<void>((resolve) => {
              finishWrite = resolve;
              entered();
            }),
        );
      });
      await Promise.all([permitHeld, writeHeld]);
      // A waiter for the permit, and the shutdown.
      const waiter = permits.acquire();
      const closing = tracked(engine.close({ timeout: 30_000 }));
      await expect(waiter).rejects.toBeInstanceOf(LockClosingError);
      await expect(permits.tryAcquire()).rejects.toBeInstanceOf(LockClosingError);
      await expect(rw.tryAcquire('read')).rejects.toBeInstanceOf(LockClosingError);

      // Both holders are still held on the nodes: another engine cannot take either.
      await expect(semaphore(other, name, 1).tryAcquire()).rejects.toThrow(/held/);
      await expect(readWriteLock(other, name).tryAcquire('read')).rejects.toThrow(/writer/);
      expect(closing.done()).toBe(false);

      finishPermit();
      // The permit came back on the nodes; the write hold still keeps the close waiting.
      const permit = await semaphore(other, name, 1).acquire();
      await permit.release();
      expect(closing.done()).toBe(false);

      finishWrite();
      await closing.promise;
      const read = await readWriteLock(other, name).tryAcquire('read');
      await read.release();
    } finally {
      await Promise.all([engine.close({ timeout: 0 }), other.close()]);
    }
  });

  it('aborts a holder that outlives the timeout and releases its permit on every node', async () => {
    const engine = await openEngine();
    const other = await openEngine();
    try {
      const name = unique('overdue');
      let signal!: AbortSignal;
      const entered = new Promise<void>((resolve) => {
        void semaphore(engine, name, 1)
          .using(async (permit) => {
            signal = permit.signal;
            resolve();
            // Runs until its signal aborts.
            await new Promise((stop) => permit.signal.addEventListener('abort', stop));
          })
          .catch(() => undefined);
      });
      await entered;
      await engine.close({ timeout: 100 });
      expect(signal.aborted).toBe(true);
      expect(signal.reason).toBeInstanceOf(LockLostError);
      const permit = await semaphore(other, name, 1).tryAcquire();
      await permit.release();
    } finally {
      await other.close();
    }
  });
});
