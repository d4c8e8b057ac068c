import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { LockEngine, type LockEngineOptions, type LockNodeSpec } from '../../lib/engine/index.js';
import { nextReady } from '../support/engine-ready.js';
import { timedHandOff } from '../support/lock-events.js';
import { readWriteLocksAndSemaphores } from './lease-primitives.js';
import { quietLogger } from '../support/quiet-logger.js';
import { RedisSentinelSetup } from '../support/redis-topologies.js';

/** A retry delay so long that only a wake-up can explain a fast hand-off. */
const SLOW_POLLING = { delay: 5000, factor: 1, maxDelay: 5000, jitter: 0 };
const keyOf = (resource: string) => `lock:{${resource}}`;

let setup: RedisSentinelSetup;
const engines: LockEngine[] = [];
const clients: Redis[] = [];

beforeAll(async () => {
  setup = await RedisSentinelSetup.start();
}, 30_000);
afterAll(async () => {
  await Promise.all([...engines.map((e) => e.close()), ...clients.map((c) => c.quit())]);
  await setup?.stop();
});

async function connected(node: LockNodeSpec, options: Partial<LockEngineOptions> = {}) {
  const logger = quietLogger();
  const engine = new LockEngine({ nodes: [node], logger, ...options });
  engines.push(engine);
  await engine.connect();
  return { engine, logger };
}

const sentinelNode = () => ({ sentinels: setup.sentinels, name: setup.name });
const label = () =>
  `sentinel ${setup.name}@${setup.sentinels.map((s) => `${s.host}:${s.port}`).join(',')}`;

describe('a Sentinel-managed master as a node', () => {
  it('locks on the master Sentinel names, given as { sentinels, name }', async () => {
    const { engine } = await connected(sentinelNode());
    expect(engine.nodes[0]).toMatchObject({ topology: 'sentinel', label: label(), owned: true });
    const master = await setup.master();
    const resource = `order:${randomUUID()}`;
    const lock = await engine.tryAcquire(resource);
    expect(await master.cli('GET', keyOf(resource))).toBe(lock.value);
    await lock.release();
    expect(await master.cli('EXISTS', keyOf(resource))).toBe('0');
  });

  it('uses a Sentinel-backed ioredis client the user owns and leaves it open', async () => {
    const mine = new Redis(sentinelNode());
    clients.push(mine);
    const { engine } = await connected(mine);
    expect(engine.nodes[0]).toMatchObject({ topology: 'sentinel', label: label(), owned: false });
    await (await engine.tryAcquire(`owned:${randomUUID()}`)).release();
    await engine.close();
    expect(await mine.ping()).toBe('PONG');
  });

  it('warns at connect time that a failover can lose lock keys and fence counters', async () => {
    const { logger } = await connected(sentinelNode());
    expect(logger.warnings).toEqual([
      `node ${label()} is a master that Sentinel fails over ('${setup.name}', 1 replica(s)): ` +
        'replication is asynchronous, so a failover can lose the latest lock keys (two holders at once) and ' +
        'fence counter increments (tokens can repeat). Use independent nodes without failover for locks that ' +
        'must never overlap; after a failover, delete its fence counters so that they restart from the clock ' +
        '(docs/topologies.md).',
    ]);
    const [zeroTtl, noFencing] = await Promise.all([
      connected(sentinelNode(), { fenceCounterTtl: 0 }),
      connected(sentinelNode(), { fencing: false }),
    ]);
    expect(zeroTtl.logger.warnings[0]).toMatch(
      /tokens can repeat\)\. Use independent nodes without failover for locks that must never overlap, or set fenceCounterTtl > 0 so that counters the new master lacks restart from the clock, not from 1\.$/,
    );
    expect(noFencing.logger.warnings[0]).toMatch(
      /can lose the latest lock keys \(two holders at once\)\. Use independent nodes without failover for locks that must never overlap\.$/,
    );
  });

  it('wakes a waiter through the master’s release messages', async () => {
    const [{ engine: holder }, { engine: waiter }] = await Promise.all([
      connected(sentinelNode()),
      connected(sentinelNode()),
    ]);
    const resource = `wake:${randomUUID()}`;
    const lock = await holder.acquire(resource);
    const { next, ms } = await timedHandOff(lock, waiter, resource, SLOW_POLLING);
    await next.release();
    expect(ms).toBeLessThan(1000);
  });

  it('takes read-write locks and semaphore permits on the master, and wakes their waiters through its release messages', async () => {
    const [{ engine }, { engine: other }] = await Promise.all([
      connected(sentinelNode()),
      connected(sentinelNode()),
    ]);
    await readWriteLocksAndSemaphores(engine, other);
  });

  // Last: it swaps the roles of the two servers.
  it('locks again after a failover, on the new master, with tokens that go on from the replicated counter', async () => {
    const [{ engine }, { engine: waiter }] = await Promise.all([
      connected(sentinelNode()),
      connected(sentinelNode()),
    ]);
    const resource = `failover:${randomUUID()}`;
    const before = await engine.tryAcquire(resource);
    await before.release();
    const oldMaster = await setup.master();
    // Caught up: the replica acknowledged the key's deletion and the counter.
    expect(await oldMaster.cli('WAIT', 1, 5000)).toBe('1');

    // The engine's own clients follow the announcement (+switch-master) and reconnect.
    const rejoined = [engine, waiter].map((e) => nextReady(e.nodes[0].client));
    const newMaster = await setup.failover();
    expect(newMaster).not.toBe(oldMaster);
    await Promise.all(rejoined);

    const after = await engine.tryAcquire(resource);
    expect(await newMaster.cli('GET', keyOf(resource))).toBe(after.value);
    expect(after.token).toBe(before.token! + 1);

    // Wake-ups work on the new master too: the subscriber followed it.
    const { next, ms } = await timedHandOff(after, waiter, resource, SLOW_POLLING);
    expect(ms).toBeLessThan(1000);
    expect(next.token).toBe(after.token! + 1);
    await next.release();
  });
});
