/**
 * The lock calls of one turn of the event loop leave for each node as one
 * BATCH command (lib/engine/lock-node.ts, turn-batch.ts), on an engine of
 * several nodes and on an engine of one; there, a call that finds the node
 * idle leaves at once, and the rest of its turn share one command. Checked
 * on real redis-server processes through the servers' own command counts,
 * with each caller still getting its own reply, its own error and its place
 * in the order of calls.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { LockEngine, LockUnavailableError, type Lock } from '../../lib/engine/index.js';
import { ALL_SCRIPTS, BATCHABLE } from '../../lib/engine/lua-scripts.js';
import { quietLogger } from '../support/quiet-logger.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';

const redis = useRedisNodes(3);
const unique = (name: string) => `${name}:${randomUUID()}`;

/** How many EVALSHA and EVAL commands the node has run since the last CONFIG RESETSTAT. */
async function nodeScriptCalls(admin: Redis): Promise<number> {
  const stats = await admin.info('commandstats');
  let calls = 0;
  for (const match of stats.matchAll(/^cmdstat_(?:evalsha|eval):calls=(\d+)/gm)) {
    calls += Number(match[1]);
  }
  return calls;
}

/**
 * Waits until everything the engine sent so far has reached its nodes: a
 * PING behind it on each of the engine's connections is answered (a quorum
 * round settles before its last node answers).
 */
async function sent(engine: LockEngine): Promise<void> {
  await new Promise((resolve) => setImmediate(resolve));
  await Promise.all(engine.nodes.map((node) => node.client.ping()));
}

/** The script calls each of the engine's nodes has run since the last {@link resetStats}. */
async function scriptCalls(engine: LockEngine, admins: readonly Redis[]): Promise<number[]> {
  await sent(engine);
  return Promise.all(admins.slice(0, engine.nodes.length).map(nodeScriptCalls));
}

let admins: Redis[];
beforeAll(() => {
  admins = redis.nodes.map((node) => new Redis(node.url));
});
afterAll(() => {
  for (const admin of admins) admin.disconnect();
});
/**
 * Zeroes every node's command counts once the engine's earlier commands have
 * reached them (the last node of a test's releases may still be on its way).
 */
async function resetStats(engine: LockEngine): Promise<void> {
  await sent(engine);
  await Promise.all(admins.map((admin) => admin.config('RESETSTAT')));
}
describe.each([3, 1])('concurrent lock calls on an engine of %i node(s)', (count) => {
  /** Every node of the engine alike: `n` script calls each. */
  const each = (n: number) => Array<number>(count).fill(n);
  /**
   * The commands of a turn's calls made on idle nodes: one BATCH, and on an
   * engine of one node the first call by itself before it (it left at once).
   */
  const turn = count === 1 ? 2 : 1;
  /** Connections of their own to the engine's nodes. */
  const nodes = () => admins.slice(0, count);
  let engine: LockEngine;
  beforeAll(async () => {
    engine = new LockEngine({
      nodes: redis.nodes.slice(0, count).map((n) => n.url),
      logger: quietLogger(),
    });
    await engine.connect();
    // The node learns BATCH by its first use (NOSCRIPT, then by source): not counted below.
    const warm = await Promise.all([
      engine.tryAcquire(unique('warm')),
      engine.tryAcquire(unique('warm')),
    ]);
    await Promise.all(warm.map((l) => l.release()));
    // And every script a lone call may run, so that none is counted twice (NOSCRIPT, then EVAL).
    for (const admin of nodes())
      for (const script of BATCHABLE) await admin.script('LOAD', script.source);
  });
  afterAll(async () => {
    await engine.close();
  });
  beforeEach(() => resetStats(engine));

  it('reach each node as one command, and every caller gets its own lock and token', async () => {
    const resources = Array.from({ length: 20 }, () => unique('batch'));
    const locks = await Promise.all(resources.map((r) => engine.tryAcquire(r)));
    expect(await scriptCalls(engine, admins)).toEqual(each(turn));
    expect(locks.map((l) => l.resources[0])).toEqual(resources);
    expect(new Set(locks.map((l) => l.value)).size).toBe(20);
    for (const lock of locks) {
      for (const admin of nodes())
        expect(await admin.get(`lock:{${lock.resources[0]}}`)).toBe(lock.value);
      expect(lock.token).toBeGreaterThan(0);
    }
    await resetStats(engine);
    await Promise.all(locks.map((l) => l.release()));
    expect(await scriptCalls(engine, admins)).toEqual(each(turn));
    for (const r of resources)
      for (const admin of nodes()) expect(await admin.exists(`lock:{${r}}`)).toBe(0);
  });

  it('share a command when made in separate callbacks of one turn of the event loop', async () => {
    // As HTTP requests arriving together are: each handled in an I/O callback of its own. Here
    // two immediates and a tick after each: four callbacks, one turn, one command per node.
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
    expect(await scriptCalls(engine, admins)).toEqual(each(turn));
    expect(locks.map((l) => l.resources[0])).toEqual(resources);
    await Promise.all(locks.map((l) => l.release()));
  });

  it('keep one caller’s Redis error to that caller', async () => {
    const foreign = unique('foreign');
    for (const admin of nodes()) await admin.rpush(`lock:{${foreign}}`, 'not a lock');
    const resources = [unique('before'), foreign, unique('after')];
    const outcomes = await Promise.allSettled(resources.map((r) => engine.tryAcquire(r)));
    // The turn's commands for the three; then the failed caller cleans up after itself (a
    // release, sent in a later turn): one more.
    expect(await scriptCalls(engine, admins)).toEqual(each(turn + 1));
    expect(outcomes[0].status).toBe('fulfilled');
    expect(outcomes[2].status).toBe('fulfilled');
    expect(outcomes[1].status).toBe('rejected');
    const error = (outcomes[1] as PromiseRejectedResult).reason as Error;
    expect(error).toBeInstanceOf(LockUnavailableError);
    expect(error.message).toContain('WRONGTYPE');
    for (const admin of nodes())
      expect(await admin.lrange(`lock:{${foreign}}`, 0, -1)).toEqual(['not a lock']);
    await Promise.all(
      outcomes.flatMap((o) => (o.status === 'fulfilled' ? [(o.value as Lock).release()] : [])),
    );
  });

  it('hand every caller its 16-digit fencing token exactly', async () => {
    // Tokens may grow to 2^53 - 1; the batch's reply must not round them (as %.14g would).
    const start = 9_007_199_254_740_000;
    for (const admin of nodes()) await admin.set('lock:fence', String(start));
    const resources = Array.from({ length: 8 }, () => unique('digits'));
    const locks = await Promise.all(resources.map((r) => engine.tryAcquire(r)));
    expect(await scriptCalls(engine, admins)).toEqual(each(turn));
    expect(locks.map((l) => l.token)).toEqual(resources.map((_, i) => start + i + 1));
    for (const admin of nodes())
      expect(await admin.get('lock:fence')).toBe(String(start + resources.length));
    await Promise.all(locks.map((l) => l.release()));
  });

  it('run in the order they were made: a release followed by an acquire of the same key grants it', async () => {
    const resource = unique('order');
    const first = await engine.tryAcquire(resource);
    await resetStats(engine);
    const released = first.release();
    const second = engine.tryAcquire(resource);
    await released;
    const lock = await second;
    // The release and the acquire in one command per node, or on an engine of one node the
    // release at once and the acquire after it on the same connection: the node runs them in order.
    expect(await scriptCalls(engine, admins)).toEqual(each(turn));
    expect(lock.token).toBeGreaterThan(first.token!);
    await lock.release();
  });

  it('still work after the nodes forgot their scripts (SCRIPT FLUSH)', async () => {
    for (const admin of nodes()) await admin.script('FLUSH');
    const resources = Array.from({ length: 5 }, () => unique('flushed'));
    const locks = await Promise.all(resources.map((r) => engine.tryAcquire(r)));
    // The turn's commands by SHA, refused with NOSCRIPT (they did not run); every script loaded
    // again (an EVAL each) and the turn's commands sent once more, in their order.
    expect(await scriptCalls(engine, admins)).toEqual(each(turn + ALL_SCRIPTS.length + turn));
    for (const lock of locks)
      for (const admin of nodes())
        expect(await admin.get(`lock:{${lock.resources[0]}}`)).toBe(lock.value);
    await Promise.all(locks.map((l) => l.release()));
  });
});
