/**
 * One set of cases, run against the in-memory engine of
 * `nestjs-redis-lock/testing` and against the real LockEngine on three
 * redis-server nodes: what a test observes through the in-memory engine is
 * what the application gets in production. Each side supplies the same few
 * powers (someone else holds a resource, a lease ends on the nodes, nodes stop
 * answering) in its own way.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { once } from 'node:events';
import {
  Lock,
  LockBusyError,
  LockEngine,
  LockLostError,
  LockOptionsError,
  LockTimeoutError,
  LockUnavailableError,
  readWriteLock,
  semaphore,
  type LockEngineOptions,
} from '../../lib/engine/index.js';
import { InMemoryLockEngine } from '../../lib/testing/index.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';

/** What a case needs from an engine beyond its own API. */
interface Subject {
  readonly name: string;
  readonly engine: LockEngine | InMemoryLockEngine;
  /** Another process takes `resource` for `ttl` ms. */
  holdElsewhere(resource: string, ttl: number): Promise<{ release(): Promise<void> }>;
  /** The lease of `resource` ends on the nodes now. */
  endLease(resource: string): Promise<void>;
  /** The first `count` nodes stop answering. */
  failNodes(count: number): Promise<void>;
  restoreNodes(): Promise<void>;
}

// A node that stops answering costs the real engine 250 ms. Shorter made the stall of a loaded
// machine (two cores, the suite's other files) count as nodes failing: with 50 ms, a full run
// once found two of three healthy nodes silent and the lock unavailable.
const ENGINE_OPTIONS: Omit<LockEngineOptions, 'nodes'> = {
  nodeTimeout: 250,
  logger: { warn: () => undefined, error: () => undefined },
  checkNodes: false,
};

const redis = useRedisNodes(3);
const subjects: Subject[] = [];
const engines: (LockEngine | InMemoryLockEngine)[] = [];

beforeAll(async () => {
  const urls = redis.nodes.map((node) => node.url);
  const real = new LockEngine({ ...ENGINE_OPTIONS, nodes: urls });
  const other = new LockEngine({ ...ENGINE_OPTIONS, nodes: urls });
  engines.push(real, other);
  await Promise.all([real.connect(), other.connect()]);
  subjects.push({
    name: 'LockEngine on redis-server',
    engine: real,
    async holdElsewhere(resource, ttl) {
      const lock = await other.tryAcquire(resource, { ttl });
      return { release: async () => void (await lock.release()) };
    },
    async endLease(resource) {
      await Promise.all(redis.nodes.map((node) => node.cli('DEL', `lock:{${resource}}`)));
    },
    async failNodes(count) {
      await Promise.all(redis.nodes.slice(0, count).map((node) => node.pause()));
    },
    async restoreNodes() {
      await Promise.all(redis.nodes.map((node) => node.resume()));
    },
  });

  const memory = new InMemoryLockEngine({ ...ENGINE_OPTIONS, nodes: 3 });
  engines.push(memory);
  subjects.push({
    name: 'InMemoryLockEngine',
    engine: memory,
    async holdElsewhere(resource, ttl) {
      const hold = memory.hold(resource, { ttl });
      return { release: async () => hold.release() };
    },
    async endLease(resource) {
      memory.expire(resource);
    },
    async failNodes(count) {
      memory.failNodes(...[0, 1, 2].slice(0, count));
    },
    async restoreNodes() {
      memory.restoreNodes();
    },
  });
}, 30_000);

afterAll(async () => {
  for (const subject of subjects) await subject.restoreNodes();
  await Promise.all(engines.map((engine) => engine.close()));
});

let unique = 0;
/** A resource no other case touches. */
const fresh = (what: string) => `contract:${what}:${++unique}`;

/** Runs `test` once per engine, each under its own name. */
function contract(title: string, test: (subject: Subject) => Promise<void>, timeout?: number) {
  describe(title, () => {
    for (const name of ['InMemoryLockEngine', 'LockEngine on redis-server']) {
      it(
        name,
        async () => {
          const subject = subjects.find((s) => s.name === name);
          if (!subject) throw new Error(`no subject ${name}: did beforeAll fail?`);
          await test(subject);
        },
        timeout,
      );
    }
  });
}

describe('the in-memory engine keeps the real engine’s contract', () => {
  contract('fencing tokens increase with every grant, per resource', async ({ engine }) => {
    const resource = fresh('tokens');
    const tokens: number[] = [];
    for (let i = 0; i < 3; i++) {
      const lock = await engine.acquire(resource);
      expect(lock).toBeInstanceOf(Lock);
      tokens.push(lock.token!);
      await lock.release();
    }
    expect(tokens.every((token) => Number.isSafeInteger(token) && token > 0)).toBe(true);
    expect(tokens[1]).toBeGreaterThan(tokens[0]!);
    expect(tokens[2]).toBeGreaterThan(tokens[1]!);

    const both = await engine.acquire([fresh('a'), resource]);
    expect(both.tokens).toHaveLength(2);
    expect(both.tokens[1]).toBeGreaterThan(tokens[2]!);
    await both.release();
  });

  contract(
    'a resource held by someone else: tryAcquire throws LockBusyError with the lease left as retryAfter',
    async (subject) => {
      const resource = fresh('busy');
      const other = await subject.holdElsewhere(resource, 5_000);
      try {
        const error = await subject.engine.tryAcquire(resource).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(LockBusyError);
        expect(error).not.toBeInstanceOf(LockTimeoutError);
        const busy = error as LockBusyError;
        expect(busy.code).toBe('LOCK_BUSY');
        expect(busy.resources).toEqual([resource]);
        expect(busy.retryAfter).toBeGreaterThan(4_000);
        expect(busy.retryAfter).toBeLessThanOrEqual(5_000);
        expect(busy.message).toContain('Retry later');
      } finally {
        await other.release();
      }
    },
  );

  contract(
    'waiting past waitTimeout throws LockTimeoutError, a LockBusyError that counts its attempts',
    async (subject) => {
      const resource = fresh('timeout');
      const other = await subject.holdElsewhere(resource, 5_000);
      try {
        const error = (await subject.engine
          .acquire(resource, { waitTimeout: 60, retry: { delay: 10, factor: 1, jitter: 0 } })
          .catch((e: unknown) => e)) as LockTimeoutError;
        expect(error).toBeInstanceOf(LockTimeoutError);
        expect(error).toBeInstanceOf(LockBusyError);
        expect(error.code).toBe('LOCK_TIMEOUT');
        expect(error.attempts).toBeGreaterThan(1);
        expect(error.waited).toBeGreaterThanOrEqual(60);
        expect(error.retryAfter).toBeGreaterThan(0);
        expect(error.message).toContain('Raise waitTimeout');
      } finally {
        await other.release();
      }
    },
  );

  contract(
    'a call that may wait throws LockTimeoutError even when its wait ran out on the first attempt',
    async (subject) => {
      const resource = fresh('no-wait');
      const other = await subject.holdElsewhere(resource, 5_000);
      try {
        const waited = (await subject.engine
          .acquire(resource, { waitTimeout: 0 })
          .catch((e: unknown) => e)) as LockTimeoutError;
        expect(waited).toBeInstanceOf(LockTimeoutError);
        expect(waited.attempts).toBe(1);
        expect(waited.message).toContain('Raise waitTimeout');
        // A single attempt by design is refused as busy, not as a wait that ran out.
        const single = await subject.engine.tryAcquire(resource).catch((e: unknown) => e);
        expect(single).toBeInstanceOf(LockBusyError);
        expect(single).not.toBeInstanceOf(LockTimeoutError);
      } finally {
        await other.release();
      }
    },
  );

  contract(
    'a waiter gets the lock when the holder releases it, with a higher token',
    async (subject) => {
      const resource = fresh('handoff');
      const held = await subject.engine.acquire(resource);
      const waiting = subject.engine.acquire(resource, { waitTimeout: 5_000 });
      await once(subject.engine, 'contended');
      await held.release();
      const next = await waiting;
      expect(next.token).toBeGreaterThan(held.token!);
      await next.release();
    },
  );

  contract(
    'callers waiting for one resource are served in the order they called',
    async ({ engine }) => {
      const resource = fresh('fifo');
      const holder = await engine.acquire(resource);
      const served: number[] = [];
      const waiters = [1, 2, 3].map((n) =>
        engine.using(
          resource,
          () => {
            served.push(n);
          },
          { waitTimeout: 5_000 },
        ),
      );
      // Every waiter has tried once and lined up before the holder lets go.
      for (let i = 0; i < 3; i++) await once(engine, 'contended');
      await holder.release();
      await Promise.all(waiters);
      expect(served).toEqual([1, 2, 3]);
    },
  );

  contract('a lease that ends frees the resource for the next caller', async (subject) => {
    const resource = fresh('expiry');
    // A lease long enough that a loaded machine's stalls do not end it before it is granted.
    const lease = 600;
    const other = await subject.holdElsewhere(resource, lease);
    const started = performance.now();
    const lock = await subject.engine.acquire(resource, { waitTimeout: 5_000 });
    // Not before the other holder's lease ran out (less the real engine's clock-drift margin
    // and the time its grant took to come back).
    expect(performance.now() - started).toBeGreaterThanOrEqual(lease - 100);
    await lock.release();
    await other.release();
  });

  contract(
    'extension renews the lease; once the lease ended on the nodes, extend() throws LockLostError and release() says so',
    async (subject) => {
      const resource = fresh('extend');
      const lock = await subject.engine.acquire(resource, { ttl: 1_000 });
      const before = lock.validUntil;
      await lock.extend(2_000);
      expect(lock.validUntil).toBeGreaterThan(before);
      expect(lock.isHeld).toBe(true);

      await subject.endLease(resource);
      const error = await lock.extend().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(LockLostError);
      expect((error as LockLostError).code).toBe('LOCK_LOST');
      expect(lock.signal.aborted).toBe(true);
      expect(lock.signal.reason).toBeInstanceOf(LockLostError);
      expect(lock.isHeld).toBe(false);
      expect(lock.isReleased).toBe(false);
      const result = await lock.release();
      expect(result).toMatchObject({ released: false, nodesReleased: 0 });
      // Released by its holder after it was lost (or by a shutdown's drain): it says so too.
      expect(lock.isReleased).toBe(true);
    },
  );

  contract('using() keeps extending while the routine runs, then releases', async ({ engine }) => {
    const resource = fresh('using');
    const extended: number[] = [];
    const onExtended = ({ lock }: { lock: Lock }) => {
      if (lock.resources[0] === resource) extended.push(lock.validUntil);
    };
    engine.on('extended', onExtended);
    try {
      const result = await engine.using(
        resource,
        async (lock) => {
          // A lease lost instead (a renewal late on a loaded machine) ends the wait and fails below.
          const lost = once(lock.signal, 'abort');
          while (extended.length < 2 && !lock.signal.aborted)
            await Promise.race([once(engine, 'extended'), lost]);
          expect(lock.isHeld).toBe(true);
          return lock.token;
        },
        // Renewed with half of it left: 500 ms for a stalled event loop to get to the timer (a
        // clean-clone run lost a 300 ms lease, on both engines, to a stall of over 150 ms).
        { ttl: 1000 },
      );
      expect(result).toBeGreaterThan(0);
      expect(await engine.inspect(resource)).toMatchObject({ held: false });
    } finally {
      engine.off('extended', onExtended);
    }
  });

  contract(
    'release reports the nodes that held it; a second release returns the same',
    async ({ engine }) => {
      const lock = await engine.acquire(fresh('release'));
      const result = await lock.release();
      // A release round ends once a quorum answered, so a node may not have been counted yet.
      expect(result).toMatchObject({ released: true, nodesNotHeld: 0, failures: [] });
      expect(result.nodesReleased).toBeGreaterThanOrEqual(2);
      expect(await lock.release()).toBe(result);
      expect(lock.isReleased).toBe(true);
    },
  );

  contract(
    'with one node of three down it still locks; with two down it throws LockUnavailableError',
    async (subject) => {
      const resource = fresh('outage');
      try {
        await subject.failNodes(1);
        const lock = await subject.engine.acquire(resource);
        expect((await lock.release()).released).toBe(true);

        await subject.failNodes(2);
        const error = (await subject.engine
          .acquire(resource, { waitTimeout: 0 })
          .catch((e: unknown) => e)) as LockUnavailableError;
        expect(error).toBeInstanceOf(LockUnavailableError);
        expect(error.code).toBe('LOCK_UNAVAILABLE');
        expect(error.failures).toHaveLength(2);
        expect(error.quorum).toBe(2);
        expect(error.message).toContain('2 of 3 Redis nodes must answer');
      } finally {
        await subject.restoreNodes();
      }
      const after = await subject.engine.acquire(resource, { waitTimeout: 5_000 });
      await after.release();
    },
  );

  contract(
    'inspect() and list() show the holder, its lease and the last token',
    async ({ engine }) => {
      const resource = fresh('inspect');
      const lock = await engine.acquire(resource, { ttl: 5_000 });
      const inspection = await engine.inspect(resource);
      expect(inspection).toMatchObject({
        resource,
        held: true,
        holder: lock.value,
        fence: lock.token,
      });
      expect(inspection.ttl).toBeGreaterThan(4_000);
      expect(inspection.nodes).toHaveLength(3);
      expect(await engine.list('contract:inspect:*')).toContain(resource);
      await lock.release();
      expect(await engine.inspect(resource)).toMatchObject({ held: false, fence: lock.token });
      expect(await engine.list('contract:inspect:*')).not.toContain(resource);
    },
  );

  contract('the events of a contended acquisition come in the same order', async (subject) => {
    const { engine } = subject;
    const resource = fresh('events');
    const seen: string[] = [];
    const names = ['acquired', 'contended', 'waited', 'released'] as const;
    const listeners = names.map((name) => {
      const listener = (event: { resources?: readonly string[]; lock?: Lock }) => {
        const resources = event.resources ?? event.lock?.resources;
        if (resources?.[0] === resource) seen.push(name);
      };
      engine.on(name, listener);
      return [name, listener] as const;
    });
    try {
      const other = await subject.holdElsewhere(resource, 400);
      const lock = await engine.acquire(resource, {
        retry: { delay: 20, factor: 1, jitter: 0 },
      });
      await lock.release();
      await other.release();
    } finally {
      for (const [name, listener] of listeners) engine.off(name, listener);
    }
    expect(seen[0]).toBe('contended');
    expect(seen.slice(-3)).toEqual(['waited', 'acquired', 'released']);
  });

  contract('call options are checked with the same messages', async ({ engine }) => {
    await expect(engine.acquire('x', { ttl: 5 })).rejects.toThrow(
      new LockOptionsError(
        'ttl must be a whole number of milliseconds from 10 to 2147483647 (got 5).',
      ),
    );
    await expect(engine.acquire('x', { colour: 'red' } as never)).rejects.toThrow(
      "There is no lock option 'colour'",
    );
    await expect(engine.acquire('')).rejects.toThrow('That resource name cannot be used');
  });

  contract('the extended event gives the lease the extension set', async ({ engine }) => {
    const lock = await engine.acquire(fresh('extended'), { ttl: 1000 });
    const ttls: number[] = [];
    const onExtended = ({ ttl }: { ttl: number }) => void ttls.push(ttl);
    engine.on('extended', onExtended);
    try {
      await lock.extend(3000);
      await lock.extend();
    } finally {
      engine.off('extended', onExtended);
    }
    expect(ttls).toEqual([3000, 1000]);
    await lock.release();
  });

  contract(
    'tryAcquire() refuses the options of a wait rather than ignore them',
    async ({ engine }) => {
      const refusal = (key: string) =>
        new LockOptionsError(
          `tryAcquire() makes one attempt and takes ttl and signal only (got '${key}'); ` +
            'to wait for the lock, call acquire() with waitTimeout and retry.',
        );
      const rw =
        engine instanceof LockEngine
          ? readWriteLock(engine, fresh('rw'))
          : engine.readWriteLock(fresh('rw'));
      const permits =
        engine instanceof LockEngine
          ? semaphore(engine, fresh('permits'), 2)
          : engine.semaphore(fresh('permits'), 2);
      // Plain JavaScript, or a cast: the types already leave these options out.
      const waiting = { waitTimeout: 1000 } as never;
      await expect(engine.tryAcquire(fresh('try'), waiting)).rejects.toThrow(
        refusal('waitTimeout'),
      );
      await expect(rw.tryAcquire('read', waiting)).rejects.toThrow(refusal('waitTimeout'));
      await expect(permits.tryAcquire(waiting)).rejects.toThrow(refusal('waitTimeout'));
      for (const key of ['retry', 'unavailableTimeout']) {
        const options = { [key]: key === 'retry' ? { attempts: 3 } : 1000 } as never;
        await expect(engine.tryAcquire(fresh('try'), options)).rejects.toThrow(refusal(key));
      }
      // What it takes still works.
      const lock = await engine.tryAcquire(fresh('try'), { ttl: 1000 });
      await lock.release();
    },
  );
});
