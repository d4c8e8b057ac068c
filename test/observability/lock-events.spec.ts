import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Redis } from 'ioredis';
import {
  LockBusyError,
  LockEngine,
  LockLostError,
  LockTimeoutError,
  LockUnavailableError,
  type LockEvents,
} from '../../lib/engine/index.js';
import { nextLockEvent } from '../support/lock-events.js';
import { quietLogger } from '../support/quiet-logger.js';
import {
  startRedisNodes,
  stopRedisNodes,
  type RedisNodeProcess,
} from '../../dev/redis/redis-nodes.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';
import { whenLost } from '../support/when-lost.js';

const redis = useRedisNodes(3);
const EVENTS = [
  'acquired',
  'contended',
  'waited',
  'failed',
  'extended',
  'lost',
  'released',
] as const satisfies readonly (keyof LockEvents)[];

type Recorded = { [N in keyof LockEvents]: { name: N; event: LockEvents[N][0] } }[keyof LockEvents];

/** Every event of `engine` about `resource`, in the order they fired. */
function record(engine: LockEngine, resource: string): { events: Recorded[]; stop(): void } {
  const events: Recorded[] = [];
  const listeners = EVENTS.map((name) => {
    const listener = (event: LockEvents[typeof name][0]) => {
      const resources = 'lock' in event ? event.lock.resources : event.resources;
      if (resources.includes(resource)) events.push({ name, event } as Recorded);
    };
    engine.on(name, listener as never);
    return [name, listener] as const;
  });
  return {
    events,
    stop: () => listeners.forEach(([name, listener]) => engine.off(name, listener as never)),
  };
}

const names = (events: Recorded[]) => events.map((e) => e.name);
function payload<N extends keyof LockEvents>(events: Recorded[], name: N): LockEvents[N][0] {
  const found = events.find((e) => e.name === name);
  if (!found) throw new Error(`no '${name}' event among ${names(events).join(', ')}`);
  return found.event as LockEvents[N][0];
}

let counter = 0;
const unique = (name: string) => `events:${name}:${++counter}`;

describe('lock events', () => {
  let engine: LockEngine;
  let rival: LockEngine;

  beforeAll(async () => {
    const nodes = redis.nodes.map((n) => n.url);
    engine = new LockEngine({ nodes, logger: quietLogger() });
    rival = new LockEngine({ nodes, logger: quietLogger() });
    await Promise.all([engine.connect(), rival.connect()]);
  });
  afterAll(() => Promise.all([engine.close(), rival.close()]));

  it('emits nothing while nobody listens', async () => {
    const emitted: (string | symbol)[] = [];
    const emit = engine.emit;
    engine.emit = function (this: LockEngine, name: string | symbol, ...args: unknown[]) {
      emitted.push(name);
      return (emit as (name: string | symbol, ...args: unknown[]) => boolean).call(
        this,
        name,
        ...args,
      );
    } as typeof engine.emit;
    try {
      const resource = unique('quiet');
      const lock = await engine.acquire(resource);
      await expect(rival.tryAcquire(resource)).rejects.toBeInstanceOf(LockBusyError);
      await lock.extend();
      await lock.release();
      expect(engine.eventNames()).toEqual([]);
      expect(emitted).toEqual([]);
    } finally {
      engine.emit = emit;
    }
  });

  it('reports a lock taken, extended and released: acquired, extended, released, with token, durations and node results', async () => {
    const resource = unique('lifecycle');
    const recorder = record(engine, resource);
    const lock = await engine.acquire(resource);
    await lock.extend();
    const result = await lock.release();
    recorder.stop();

    expect(names(recorder.events)).toEqual(['acquired', 'extended', 'released']);
    const acquired = payload(recorder.events, 'acquired');
    expect(acquired.lock).toBe(lock);
    expect(acquired.lock.token).toEqual(expect.any(Number));
    expect(acquired.attempts).toBe(1);
    expect(acquired.waited).toBeGreaterThan(0);
    // A round ends once a quorum granted: two or three nodes, none refused or failed.
    expect(acquired.nodes.granted).toBeGreaterThanOrEqual(engine.quorum);
    expect(acquired.nodes).toMatchObject({ denied: 0, failed: 0 });

    const extended = payload(recorder.events, 'extended');
    expect(extended.lock).toBe(lock);
    expect(extended.duration).toBeGreaterThan(0);
    expect(extended.nodes.granted).toBeGreaterThanOrEqual(engine.quorum);

    const released = payload(recorder.events, 'released');
    expect(released.result).toBe(result);
    expect(released.result.released).toBe(true);
    expect(released.held).toBeGreaterThanOrEqual(extended.duration);
    expect(released.duration).toBeGreaterThan(0);
    expect(released.duration).toBeLessThanOrEqual(released.held);
    expect(released.nodes.granted).toBe(result.nodesReleased);
  });

  it('reports a wait for a held lock: contended, waited, then acquired once the holder releases', async () => {
    const resource = unique('handoff');
    const held = await rival.acquire(resource);
    const recorder = record(engine, resource);
    const contended = nextLockEvent(engine, 'contended', resource);
    // A fallback delay far beyond the test: only the release wakes the waiter.
    const waiting = engine.acquire(resource, {
      retry: { delay: 20_000, maxDelay: 20_000, jitter: 0 },
      waitTimeout: 20_000,
    });
    const first = await contended;
    await held.release();
    const lock = await waiting;
    await lock.release();
    recorder.stop();

    // The waiter may ask once more right after lining up; then the release wakes it.
    const sequence = names(recorder.events);
    const tries = sequence.indexOf('waited');
    expect(tries).toBeGreaterThanOrEqual(1);
    expect(new Set(sequence.slice(0, tries))).toEqual(new Set(['contended']));
    expect(sequence.slice(tries)).toEqual(['waited', 'acquired', 'released']);
    expect(first).toMatchObject({ resources: [resource], attempt: 1 });
    expect(first.retryAfter).toBeGreaterThan(0);
    expect(first.nodes.denied).toBeGreaterThanOrEqual(engine.quorum);
    const waited = payload(recorder.events, 'waited');
    expect(waited).toMatchObject({ resources: [resource], attempts: tries + 1, acquired: true });
    const acquired = payload(recorder.events, 'acquired');
    expect(acquired.attempts).toBe(tries + 1);
    expect(acquired.waited).toBeGreaterThanOrEqual(waited.waited);
  });

  it('reports a single attempt on a held lock as failed (busy), without waited', async () => {
    const resource = unique('busy');
    const held = await rival.acquire(resource);
    const recorder = record(engine, resource);
    const error = await engine.tryAcquire(resource).catch((e: unknown) => e);
    recorder.stop();
    await held.release();

    expect(error).toBeInstanceOf(LockBusyError);
    expect(names(recorder.events)).toEqual(['failed']);
    const failed = payload(recorder.events, 'failed');
    expect(failed.error).toBe(error);
    expect(failed.attempts).toBe(1);
    expect(failed.waited).toBeGreaterThan(0);
    expect(failed.nodes?.denied).toBeGreaterThanOrEqual(engine.quorum);
  });

  it('reports a wait that ran out: contended, waited (not acquired), failed with LockTimeoutError', async () => {
    const resource = unique('timeout');
    const held = await rival.acquire(resource);
    const recorder = record(engine, resource);
    const error = await engine
      .acquire(resource, { waitTimeout: 300, retry: { delay: 20, maxDelay: 20 } })
      .catch((e: unknown) => e);
    recorder.stop();
    await held.release();

    expect(error).toBeInstanceOf(LockTimeoutError);
    const sequence = names(recorder.events);
    expect(sequence.slice(-2)).toEqual(['waited', 'failed']);
    expect(new Set(sequence.slice(0, -2))).toEqual(new Set(['contended']));
    const waited = payload(recorder.events, 'waited');
    const failed = payload(recorder.events, 'failed');
    expect(waited.acquired).toBe(false);
    expect(waited.attempts).toBe(failed.attempts);
    expect(failed.error).toBe(error);
    expect(failed.waited).toBeGreaterThanOrEqual(300);
  });

  it('reports a lock whose keys were taken over: acquired, lost, then released (not held)', async () => {
    const resource = unique('lost');
    const admin = redis.nodes.map((n) => new Redis(n.url));
    const recorder = record(engine, resource);
    try {
      await engine.using(
        resource,
        async (lock) => {
          await Promise.all(
            admin.map((c) => c.set(`lock:{${resource}}`, 'intruder', 'PX', 10_000)),
          );
          await whenLost(lock);
        },
        { ttl: 300 },
      );
    } finally {
      recorder.stop();
      await Promise.all(admin.map((c) => c.quit()));
    }

    expect(names(recorder.events)).toEqual(['acquired', 'lost', 'released']);
    const lost = payload(recorder.events, 'lost');
    expect(lost.error).toBeInstanceOf(LockLostError);
    expect(lost.lock).toBe(payload(recorder.events, 'acquired').lock);
    expect(lost.held).toBeGreaterThan(0);
    const released = payload(recorder.events, 'released');
    expect(released.result.released).toBe(false);
    expect(released.nodes.granted).toBe(0);
  });

  describe('with too few nodes up', () => {
    let down: RedisNodeProcess[];
    let crippled: LockEngine;

    beforeAll(async () => {
      down = await startRedisNodes(2);
      await Promise.all(down.map((n) => n.kill()));
      crippled = new LockEngine({
        nodes: [redis.nodes[0].url, ...down.map((n) => n.url)],
        logger: quietLogger(),
      });
      await crippled.connect();
    });
    afterAll(async () => {
      await crippled.close();
      await stopRedisNodes(down);
    });

    it('reports an acquisition the nodes could not answer as failed (LockUnavailableError) with the failed nodes counted', async () => {
      const resource = unique('outage');
      const recorder = record(crippled, resource);
      const error = await crippled.tryAcquire(resource).catch((e: unknown) => e);
      recorder.stop();

      expect(error).toBeInstanceOf(LockUnavailableError);
      expect(names(recorder.events)).toEqual(['failed']);
      // The round is decided by the two failures; the live node's grant may come after.
      const { nodes } = payload(recorder.events, 'failed');
      expect(nodes).toMatchObject({ denied: 0, failed: 2 });
      expect(nodes?.granted).toBeLessThanOrEqual(1);
    });
  });
});
