/**
 * Redis replies that are errors, from real redis-server processes (no mocks):
 * WRONGTYPE when another program uses our key, NOAUTH, NOSCRIPT, LOADING, and
 * no reply at all from a SIGSTOPped node. Each ends in a typed LockError
 * whose message names the node and the problem, never in an unhandled
 * rejection, and a `@Locked()` method never runs without its lock.
 */
import 'reflect-metadata';
import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import fc from 'fast-check';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import {
  isLockFailure,
  LockBusyError,
  LockContext,
  Locked,
  LockEngine,
  LockLostError,
  LockService,
  LockUnavailableError,
  RedisLockModule,
  type Lock,
  type LockEngineOptions,
  type RedisLockModuleOptions,
} from '../../lib/index.js';
import { engineReady } from '../support/engine-ready.js';
import { quietLogger } from '../support/quiet-logger.js';
import { RedisNodeProcess } from '../../dev/redis/redis-nodes.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';
import { failOnUnhandledRejections } from './unhandled-rejections.js';
import { whenLost } from '../support/when-lost.js';

const PASSWORD = 'pw-NoAuth-7';
/** Keys DEBUG POPULATE writes to the loading node; their count sets how long a reload takes. */
const POPULATED_KEYS = 10_000;

const redis = useRedisNodes(3);
failOnUnhandledRejections();

/** Needs a password nobody gives the engine here. */
let guarded: RedisNodeProcess;
/** Takes DEBUG commands, and reloads its dataset slowly (key-load-delay). */
let loader: RedisNodeProcess;

// No ':' (a @Locked key would percent-encode it): the test can name the key the method locks.
const unique = (name: string) => `${name}-${randomUUID()}`;
const keyOf = (resource: string) => `lock:{${resource}}`;
const labelOf = (node: RedisNodeProcess) => `${node.host}:${node.port}`;

const engines: LockEngine[] = [];
const apps: INestApplicationContext[] = [];
const clients: Redis[] = [];

beforeAll(async () => {
  [guarded, loader] = await Promise.all([
    RedisNodeProcess.start({ requirepass: PASSWORD }),
    RedisNodeProcess.start({ extraArgs: ['--enable-debug-command', 'yes'] }),
  ]);
  await loader.cli('DEBUG', 'POPULATE', POPULATED_KEYS, 'populated', 10);
  // Hidden settings of redis-server (7.0): a delay per key loaded, and a short interval
  // between the moments the loading server answers other clients (with LOADING).
  await loader.cli('CONFIG', 'SET', 'key-load-delay', 50);
  await loader.cli('CONFIG', 'SET', 'loading-process-events-interval-bytes', 1024);
}, 30_000);
afterAll(async () => {
  await Promise.all([guarded?.stop(), loader?.stop()]);
});
afterEach(async () => {
  // Every scenario leaves every node serving; the engines close while their nodes still run.
  await Promise.all(redis.nodes.map((n) => n.ensureRunning()));
  await Promise.all([
    ...apps.splice(0).map((a) => a.close()),
    ...engines.splice(0).map((e) => e.close()),
    ...clients.splice(0).map((c) => c.quit()),
  ]);
});

/** A client of the test's own, the "other program" that shares the node. */
function client(url: string): Redis {
  const c = new Redis(url, { disconnectTimeout: 100 });
  clients.push(c);
  return c;
}

async function engine(
  nodes: LockEngineOptions['nodes'],
  options: Partial<LockEngineOptions> = {},
): Promise<LockEngine & { logger: ReturnType<typeof quietLogger> }> {
  const logger = quietLogger();
  const created = new LockEngine({ nodes, logger, ...options });
  engines.push(created);
  await created.connect();
  return Object.assign(created, { logger });
}

/** Resolves once `check` holds, polling a state no event announces; fails after `ms`. */
async function eventually(check: () => Promise<boolean>, what: string, ms = 5000): Promise<void> {
  const deadline = performance.now() + ms;
  while (!(await check())) {
    if (performance.now() > deadline) throw new Error(`still not ${what} after ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/** The error a call ended in; fails the test if it succeeded. */
async function failure(call: Promise<unknown>): Promise<Error> {
  return call.then(
    () => {
      throw new Error('expected the call to fail, but it succeeded');
    },
    (error: Error) => error,
  );
}

// --- The application: @Locked methods that record whether they ran, and under what -------------

@Injectable()
class Jobs {
  /** One entry per run of a body: whether its lock was held as it started. */
  readonly runs: boolean[] = [];

  @Locked('job:<0>', { wait: false })
  async run(_id: string) {
    this.runs.push(LockContext.lock?.isHeld === true);
    return 'ran';
  }

  @Locked('job:<0>', { wait: 300 })
  async runWaiting(_id: string) {
    this.runs.push(LockContext.lock?.isHeld === true);
    return 'ran';
  }
}

async function lockedApp(
  options: Partial<RedisLockModuleOptions> & { nodes: RedisLockModuleOptions['nodes'] },
) {
  const logger = quietLogger();
  @Module({ imports: [RedisLockModule.forRoot({ logger, ...options })], providers: [Jobs] })
  class AppModule {}
  const app = await NestFactory.createApplicationContext(AppModule, { logger: false });
  apps.push(app);
  return { jobs: app.get(Jobs), locks: app.get(LockService), logger };
}

/** The failure of a @Locked call: a lock failure (so the interceptor maps it), the body never run. */
async function expectLockedCallRefused(jobs: Jobs, call: Promise<unknown>): Promise<Error> {
  const runsBefore = jobs.runs.length;
  const error = await failure(call);
  expect(error).toBeInstanceOf(LockUnavailableError);
  expect(isLockFailure(error)).toBe(true);
  expect(jobs.runs).toHaveLength(runsBefore);
  return error;
}

// --- WRONGTYPE ------------------------------------------------------------------------------------

describe('WRONGTYPE: another program keeps another type of value at our key', () => {
  it('fails a @Locked call on a list at its lock key with LockUnavailableError naming the node and WRONGTYPE, leaving the list alone and the method unrun', async () => {
    const [node] = redis.nodes;
    const { jobs } = await lockedApp({ nodes: [node.url] });
    const id = unique('list');
    const other = client(node.url);
    await other.rpush(keyOf(`job:${id}`), 'queued', 'work');

    const error = await expectLockedCallRefused(jobs, jobs.run(id));
    expect(error.message).toContain(labelOf(node));
    expect(error.message).toContain('WRONGTYPE');
    expect((error as LockUnavailableError).failures.map((f) => f.node)).toEqual([labelOf(node)]);
    expect(await other.lrange(keyOf(`job:${id}`), 0, -1)).toEqual(['queued', 'work']);
  });

  it('ends in a typed error whatever type of value another program keeps at a lock or fence key, leaving that value and no lock of ours behind (property)', async () => {
    const [node] = redis.nodes;
    const engines = {
      node: await engine([node.url]),
      resource: await engine([node.url], { fenceCounter: 'resource' }),
    };
    const other = client(node.url);
    const foreign = {
      list: (key: string) => other.rpush(key, 'x'),
      hash: (key: string) => other.hset(key, 'f', 'v'),
      set: (key: string) => other.sadd(key, 'm'),
      zset: (key: string) => other.zadd(key, 1, 'm'),
      stream: (key: string) => other.xadd(key, '*', 'f', 'v'),
      text: (key: string) => other.set(key, 'not a number'),
    };
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('lock', 'fence'),
        fc.constantFrom('node', 'resource'),
        fc.constantFrom(...(Object.keys(foreign) as (keyof typeof foreign)[])),
        fc.integer({ min: 1, max: 3 }),
        async (where, counter, type, count) => {
          const locks = engines[counter];
          const resources = Array.from({ length: count }, () => unique('foreign'));
          // The last resource's lock key, or the fence counter it counts on, is what another program took.
          const taken =
            where === 'lock'
              ? keyOf(resources[count - 1])
              : counter === 'node'
                ? 'lock:fence'
                : `${keyOf(resources[count - 1])}:fence`;
          await foreign[type](taken);
          const error = await failure(locks.tryAcquire(resources));

          if (where === 'lock' && type === 'text') {
            // A string at the lock key reads as another holder (without a lease).
            expect(error).toBeInstanceOf(LockBusyError);
          } else {
            expect(error).toBeInstanceOf(LockUnavailableError);
            expect(error.message).toContain(labelOf(node));
            expect(error.message).toMatch(
              type === 'text'
                ? /not an integer/
                : /WRONGTYPE Operation against a key holding the wrong kind of value/,
            );
          }
          expect(await other.type(taken)).toBe(type === 'text' ? 'string' : type);
          // A failed attempt releases what it wrote (a fire-and-forget cleanup round).
          await eventually(
            async () =>
              (await other.exists(...resources.map(keyOf))) === (where === 'lock' ? 1 : 0),
            'cleaned up',
          );
          // The node's counter serves every lock: give it back.
          if (taken === 'lock:fence') await other.del(taken);
        },
      ),
      { numRuns: 30 },
    );
  });

  it('loses a held lock whose key another program replaced with a list: the signal aborts with LockLostError before the lease ends, and the release warns instead of throwing', async () => {
    const [node] = redis.nodes;
    const ttl = 1000;
    const locks = await engine([node.url], { ttl });
    const other = client(node.url);
    const resource = unique('replaced');
    const result = await locks.using(resource, async (lock: Lock) => {
      let lostAt = Infinity;
      lock.signal.addEventListener('abort', () => (lostAt = performance.now()));
      // The lease on the node ends ttl after the grant; validUntil is that less the drift allowance.
      const leaseEnd = lock.validUntil + Math.floor(ttl * locks.options.driftFactor) + 2;
      await other.multi().del(keyOf(resource)).rpush(keyOf(resource), 'mine now').exec();
      await whenLost(lock);
      return { lostAt, leaseEnd, error: lock.signal.reason as unknown };
    });
    expect(result.error).toBeInstanceOf(LockLostError);
    expect(result.lostAt).toBeLessThan(result.leaseEnd);
    expect(await other.lrange(keyOf(resource), 0, -1)).toEqual(['mine now']);
    expect(locks.logger.warnings.join('\n')).toMatch(/did not reach node .*WRONGTYPE/s);
  });
});

// --- NOAUTH -----------------------------------------------------------------------------------------

describe('NOAUTH: a node that requires a password the engine was not given', () => {
  const noPassword = () => `redis://${guarded.host}:${guarded.port}`;

  it('starts with a warning naming the node and NOAUTH, then fails every @Locked call with LockUnavailableError, never running the method', async () => {
    const started = performance.now();
    const { jobs, logger } = await lockedApp({ nodes: [noPassword()] });
    // A refusal is final: start-up does not wait out its connect timeout for it.
    expect(performance.now() - started).toBeLessThan(1500);
    expect(logger.warnings.join('\n')).toContain(`${labelOf(guarded)}: NOAUTH`);

    const error = await expectLockedCallRefused(jobs, jobs.run(unique('noauth')));
    expect(error.message).toContain(labelOf(guarded));
    expect(error.message).toContain('NOAUTH');
    expect(error.message).not.toContain(PASSWORD);
  });

  it('still grants locks when one node of three refuses, and names that node in the release', async () => {
    const locks = await engine([redis.nodes[0].url, redis.nodes[1].url, noPassword()]);
    expect(locks.logger.warnings.join('\n')).toContain(`${labelOf(guarded)}: NOAUTH`);
    const lock = await locks.tryAcquire(unique('one-refuses'));
    const result = await lock.release();
    expect(result.released).toBe(true);
    expect(result.failures.map((f) => f.node)).toEqual([labelOf(guarded)]);
    expect(result.failures[0].error.message).toContain('NOAUTH');
  });

  it('fails with NOAUTH once a password set on a connected node takes effect on reconnect, and recovers when it is lifted', async () => {
    const node = await RedisNodeProcess.start();
    try {
      const locks = await engine([node.url], { ttl: 2000 });
      await (await locks.tryAcquire(unique('before'))).release();
      // The operator's connection, authenticated before the password is set.
      const admin = client(node.url);
      await admin.config('SET', 'requirepass', PASSWORD);
      const refused = new Promise<void>((resolve) => {
        const onError = (error: Error) => {
          if (!error.message.startsWith('NOAUTH')) return;
          locks.nodes[0].client.off('error', onError);
          resolve();
        };
        locks.nodes[0].client.on('error', onError);
      });
      await admin.call('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
      await refused;

      const error = await failure(locks.tryAcquire(unique('during')));
      expect(error).toBeInstanceOf(LockUnavailableError);
      expect(error.message).toMatch(new RegExp(`${labelOf(node)}: .*NOAUTH`));

      await admin.config('SET', 'requirepass', '');
      await engineReady(locks);
      await (await locks.tryAcquire(unique('after'))).release();
    } finally {
      await Promise.all(engines.splice(0).map((e) => e.close()));
      await Promise.all(clients.splice(0).map((c) => c.quit()));
      await node.stop();
    }
  });
});

// --- NOSCRIPT ---------------------------------------------------------------------------------------

describe('NOSCRIPT: the script cache flushed between calls', () => {
  it('acquires, extends and releases through any interleaving of SCRIPT FLUSH on any nodes (property)', async () => {
    const locks = await engine(redis.nodes.map((n) => n.url));
    const admins = redis.nodes.map((n) => client(n.url));
    const step = fc.oneof(
      fc.constant({ op: 'lock' as const }),
      fc.constant({ op: 'unlock' as const }),
      fc
        .subarray([0, 1, 2], { minLength: 1 })
        .map((flushed) => ({ op: 'flush' as const, flushed })),
    );
    await fc.assert(
      fc.asyncProperty(fc.array(step, { minLength: 1, maxLength: 12 }), async (steps) => {
        const resource = unique('flush');
        let held: Lock | undefined;
        let lastToken = 0;
        for (const s of steps) {
          if (s.op === 'flush') {
            await Promise.all(s.flushed.map((i) => admins[i].script('FLUSH')));
          } else if (s.op === 'lock' && !held) {
            held = await locks.tryAcquire(resource);
            expect(held.token).toBeGreaterThan(lastToken);
            lastToken = held.token!;
          } else if (s.op === 'lock' && held) {
            await held.extend();
          } else if (held) {
            const result = await held.release();
            expect(result.released).toBe(true);
            expect(result.failures).toEqual([]);
            held = undefined;
          }
        }
        if (held) expect((await held.release()).released).toBe(true);
      }),
      { numRuns: 25 },
    );
  });

  it('grants a burst of concurrent acquisitions right after SCRIPT FLUSH on every node', async () => {
    const locks = await engine(redis.nodes.map((n) => n.url));
    await Promise.all(redis.nodes.map((n) => n.cli('SCRIPT', 'FLUSH')));
    const granted = await Promise.all(
      Array.from({ length: 50 }, (_, i) => locks.tryAcquire(unique(`burst-${i}`))),
    );
    const results = await Promise.all(granted.map((lock) => lock.release()));
    expect(results.every((r) => r.released && r.failures.length === 0)).toBe(true);
  });

  it('runs a @Locked method once, under its lock, after SCRIPT FLUSH', async () => {
    const { jobs } = await lockedApp({ nodes: redis.nodes.map((n) => n.url) });
    await jobs.run(unique('warm'));
    await Promise.all(redis.nodes.map((n) => n.cli('SCRIPT', 'FLUSH')));
    await expect(jobs.run(unique('after-flush'))).resolves.toBe('ran');
    expect(jobs.runs).toEqual([true, true]);
  });
});

// --- LOADING ----------------------------------------------------------------------------------------

describe('LOADING: a node still loading its dataset', () => {
  /**
   * Starts DEBUG RELOAD on the loader node (it saves, then loads its data
   * again, slowly) and resolves once it answers LOADING; the returned promise
   * settles when the reload is over.
   */
  async function reloading(): Promise<{ done: Promise<unknown>; observer: Redis }> {
    // Both connect first: a client that connects during the load waits for it (ioredis's ready check).
    const admin = client(loader.url);
    const observer = client(loader.url);
    await Promise.all([admin.ping(), observer.ping()]);
    const done = admin.call('DEBUG', 'RELOAD');
    await eventually(
      async () => /loading:1/.test(await observer.info('persistence')),
      'loading',
      10_000,
    );
    return { done, observer };
  }

  it('fails a @Locked call on the loading node with LockUnavailableError naming it and LOADING, never running the method; a waiting acquisition gets the lock once it has loaded', async () => {
    const { jobs, locks } = await lockedApp({ nodes: [loader.url] });
    const attempts: number[] = [];
    locks.on('acquired', (event) => attempts.push(event.attempts));
    const { done } = await reloading();

    const error = await expectLockedCallRefused(jobs, jobs.run(unique('loading')));
    expect(error.message).toContain(`${labelOf(loader)}: LOADING`);

    // Waiting through the reload, not only through contention: its own outage budget too.
    const waited = await locks.acquire(unique('after-loading'), {
      waitTimeout: 15_000,
      unavailableTimeout: 15_000,
    });
    expect(attempts.at(-1)).toBeGreaterThan(1);
    await waited.release();
    await done;
  }, 30_000);

  it('still grants locks while one node of three loads, without that node', async () => {
    const locks = await engine([loader.url, redis.nodes[0].url, redis.nodes[1].url]);
    const resource = unique('quorum-while-loading');
    const { done, observer } = await reloading();
    const lock = await locks.tryAcquire(resource);
    expect(await observer.info('persistence')).toMatch(/loading:1/);
    expect((await lock.release()).released).toBe(true);
    await done;
    // The loading node refused the grant (LOADING) instead of queueing it.
    expect(await observer.exists(keyOf(resource))).toBe(0);
  }, 30_000);
});

// --- No reply: SIGSTOP -----------------------------------------------------------------------------

describe('timeouts: a node paused with SIGSTOP answers nothing', () => {
  it('fails a @Locked call on a paused node after nodeTimeout with LockUnavailableError saying so, never running the method, and leaves no key once the node resumes', async () => {
    const node = redis.nodes[2];
    const { jobs } = await lockedApp({ nodes: [node.url], ttl: 2000, nodeTimeout: 200 });
    const id = unique('paused');
    await node.pause();
    const started = performance.now();
    const error = await expectLockedCallRefused(jobs, jobs.run(id));
    expect(performance.now() - started).toBeLessThan(1500);
    expect(error.message).toContain(`${labelOf(node)}: no answer within 200 ms`);

    await node.resume();
    // The acquire the node queued runs now, then the cleanup release queued after it.
    const view = client(node.url);
    await eventually(async () => (await view.exists(keyOf(`job:${id}`))) === 0, 'released');
  });

  it('ends a waiting @Locked call within its wait when a majority is paused, naming both paused nodes, never running the method', async () => {
    const { jobs } = await lockedApp({
      nodes: redis.nodes.map((n) => n.url),
      ttl: 2000,
      nodeTimeout: 100,
    });
    await Promise.all([redis.nodes[0].pause(), redis.nodes[1].pause()]);
    const started = performance.now();
    const error = (await expectLockedCallRefused(
      jobs,
      jobs.runWaiting(unique('majority')),
    )) as LockUnavailableError;
    // wait: 300, plus one last round of at most nodeTimeout.
    expect(performance.now() - started).toBeLessThan(2000);
    expect(error.failures.map((f) => f.node).sort()).toEqual(
      [redis.nodes[0], redis.nodes[1]].map(labelOf).sort(),
    );
  });
});
