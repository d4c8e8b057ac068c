/**
 * Concurrent lock calls bound for the same node leave as one BATCH command
 * behind the turn's first call, which leaves at once (lib/engine/lock-node.ts,
 * turn-batch.ts): checked on real redis-server processes through
 * the server's own command counts, with each caller still getting its own
 * reply, its own error and its place in the order of calls.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { LockEngine, LockUnavailableError, type Lock } from '../../lib/engine/index.js';
import { ALL_SCRIPTS, BATCHABLE } from '../../lib/engine/lua-scripts.js';
import { quietLogger } from '../support/quiet-logger.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';

const redis = useRedisNodes(1);
const unique = (name: string) => `${name}:${randomUUID()}`;

/** How many EVALSHA and EVAL commands the node has run since the last CONFIG RESETSTAT. */
async function scriptCalls(admin: Redis): Promise<number> {
  const stats = await admin.info('commandstats');
  let calls = 0;
  for (const match of stats.matchAll(/^cmdstat_(?:evalsha|eval):calls=(\d+)/gm)) {
    calls += Number(match[1]);
  }
  return calls;
}

describe('concurrent lock calls on one node', () => {
  let engine: LockEngine;
  let admin: Redis;
  beforeAll(async () => {
    admin = new Redis(redis.nodes[0].url);
    engine = new LockEngine({ nodes: [redis.nodes[0].url], logger: quietLogger() });
    await engine.connect();
    // The node learns BATCH by its first use (NOSCRIPT, then by source): not counted below.
    const warm = await Promise.all([
      engine.tryAcquire(unique('warm')),
      engine.tryAcquire(unique('warm')),
    ]);
    await Promise.all(warm.map((l) => l.release()));
    // And every script a lone call may run, so that none is counted twice (NOSCRIPT, then EVAL).
    for (const script of BATCHABLE) await admin.script('LOAD', script.source);
  });
  afterAll(async () => {
    await engine.close();
    admin.disconnect();
  });
  beforeEach(async () => {
    await admin.config('RESETSTAT');
  });

  it('reach the node as two commands, and every caller gets its own lock and token', async () => {
    // The turn's first call leaves at once (the node starts on it while the client makes the
    // rest), the other 19 together at the end of the turn.
    const resources = Array.from({ length: 20 }, () => unique('batch'));
    const locks = await Promise.all(resources.map((r) => engine.tryAcquire(r)));
    expect(await scriptCalls(admin)).toBe(2);
    expect(locks.map((l) => l.resources[0])).toEqual(resources);
    expect(new Set(locks.map((l) => l.value)).size).toBe(20);
    for (const lock of locks) {
      expect(await admin.get(`lock:{${lock.resources[0]}}`)).toBe(lock.value);
      expect(lock.token).toBeGreaterThan(0);
    }
    await admin.config('RESETSTAT');
    await Promise.all(locks.map((l) => l.release()));
    expect(await scriptCalls(admin)).toBe(2);
    for (const r of resources) expect(await admin.exists(`lock:{${r}}`)).toBe(0);
  });

  it('share a command when made in separate callbacks of one turn of the event loop', async () => {
    // As HTTP requests arriving together are: each handled in an I/O callback of its own. Here
    // two immediates and a tick after each: four callbacks, one turn; the first call leaves at
    // once, the three made after it in the same turn as one command.
    const resources = Array.from({ length: 4 }, () => unique('turn'));
    const calls: Promise<Lock>[] = [];
    await new Promise<void>((resolve) => {
      setImmediate(() => {
        calls.push(engine.tryAcquire(resources[0]));
        process.nextTick(() => calls.push(engine.tryAcquire(resources[1])));
      });
      setImmediate(() => {
        calls.push(engine.tryAcquire(resources[2]));
        process.nextTick(() => {
          calls.push(engine.tryAcquire(resources[3]));
          resolve();
        });
      });
    });
    const locks = await Promise.all(calls);
    expect(await scriptCalls(admin)).toBe(2);
    expect(locks.map((l) => l.resources[0])).toEqual(resources);
    await Promise.all(locks.map((l) => l.release()));
  });

  it('keep one caller’s Redis error to that caller', async () => {
    const foreign = unique('foreign');
    await admin.rpush(`lock:{${foreign}}`, 'not a lock');
    const resources = [unique('before'), foreign, unique('after')];
    const outcomes = await Promise.allSettled(resources.map((r) => engine.tryAcquire(r)));
    // The first call alone, the other two together; then the failed caller cleans up after
    // itself (a release, sent in a later turn): once a PING behind it on the engine's connection
    // is answered, the node has run all three.
    await new Promise((resolve) => setImmediate(resolve));
    await engine.nodes[0].client.ping();
    expect(await scriptCalls(admin)).toBe(3);
    expect(outcomes[0].status).toBe('fulfilled');
    expect(outcomes[2].status).toBe('fulfilled');
    expect(outcomes[1].status).toBe('rejected');
    const error = (outcomes[1] as PromiseRejectedResult).reason as Error;
    expect(error).toBeInstanceOf(LockUnavailableError);
    expect(error.message).toContain('WRONGTYPE');
    expect(await admin.lrange(`lock:{${foreign}}`, 0, -1)).toEqual(['not a lock']);
    await Promise.all(
      outcomes.flatMap((o) => (o.status === 'fulfilled' ? [(o.value as Lock).release()] : [])),
    );
  });

  it('hand every caller its 16-digit fencing token exactly', async () => {
    // Tokens may grow to 2^53 - 1; the batch's reply must not round them (as %.14g would).
    const start = 9_007_199_254_740_000;
    await admin.set('lock:fence', String(start));
    const resources = Array.from({ length: 8 }, () => unique('digits'));
    const locks = await Promise.all(resources.map((r) => engine.tryAcquire(r)));
    expect(await scriptCalls(admin)).toBe(2);
    expect(locks.map((l) => l.token)).toEqual(resources.map((_, i) => start + i + 1));
    expect(await admin.get('lock:fence')).toBe(String(start + resources.length));
    await Promise.all(locks.map((l) => l.release()));
  });

  it('run in the order they were made: a release followed by an acquire of the same key grants it', async () => {
    const resource = unique('order');
    const first = await engine.tryAcquire(resource);
    await admin.config('RESETSTAT');
    const released = first.release();
    const second = engine.tryAcquire(resource);
    await released;
    const lock = await second;
    // The release alone, then the acquire, on the same connection: the node runs them in order.
    expect(await scriptCalls(admin)).toBe(2);
    expect(lock.token).toBeGreaterThan(first.token!);
    await lock.release();
  });

  it('still work after the node forgot its scripts (SCRIPT FLUSH), and never out of order', async () => {
    await admin.script('FLUSH');
    const resources = Array.from({ length: 5 }, () => unique('flushed'));
    const outcomes = await Promise.allSettled(resources.map((r) => engine.tryAcquire(r)));
    // The first call by SHA, then the BATCH of the other four by SHA: both refused with
    // NOSCRIPT (neither ran). Every script is loaded again (an EVAL each), and a refused call is
    // sent once more only if it was the last to leave: one re-sent after a later call could run
    // after it (a clean-up before its own acquisition). The first call never is (the BATCH left
    // after it): its caller gets the error and no lock, and its attempt cleans up after itself
    // with a release. The BATCH is re-sent when its NOSCRIPT arrives before that release
    // leaves, as when both replies come in one read; when the release left first, its callers
    // get the error too. Either way, no call ran out of order and the next tries are granted.
    await new Promise((resolve) => setImmediate(resolve));
    await engine.nodes[0].client.ping();
    expect(await scriptCalls(admin)).toBeGreaterThanOrEqual(2 + ALL_SCRIPTS.length + 1);
    expect(outcomes[0].status).toBe('rejected');
    expect(new Set(outcomes.slice(1).map((o) => o.status)).size).toBe(1);
    const locks: Lock[] = [];
    for (const [i, outcome] of outcomes.entries()) {
      const key = `lock:{${resources[i]}}`;
      if (outcome.status === 'fulfilled') {
        locks.push(outcome.value);
        expect(await admin.exists(key)).toBe(1);
        continue;
      }
      const error = outcome.reason as Error;
      expect(error).toBeInstanceOf(LockUnavailableError);
      expect(error.message).toContain('NOSCRIPT');
      expect(await admin.exists(key)).toBe(0);
      // The scripts are back: the refused caller's next try is granted.
      locks.push(await engine.tryAcquire(resources[i]));
    }
    expect(locks).toHaveLength(resources.length);
    await Promise.all(locks.map((l) => l.release()));
  });
});
