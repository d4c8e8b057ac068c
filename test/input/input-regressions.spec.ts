/**
 * Bad input the library once handled badly (found by the property tests in
 * this folder), kept as regression tests: each states the behaviour wanted.
 */
import 'reflect-metadata';
import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import {
  Lock,
  LockEngine,
  LockOptionsError,
  LockUnavailableError,
  RedisLockModule,
  type LockEngineOptions,
} from '../../lib/index.js';
import { quietLogger } from '../support/quiet-logger.js';
import { RedisNodeProcess } from '../../dev/redis/redis-nodes.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';
import { failOnUnhandledRejections } from './unhandled-rejections.js';

const redis = useRedisNodes(1);
failOnUnhandledRejections();

const unique = (name: string) => `${name}-${randomUUID()}`;
const engines: LockEngine[] = [];
afterEach(async () => {
  await Promise.all(redis.nodes.map((n) => n.ensureRunning()));
  await Promise.all(engines.splice(0).map((e) => e.close()));
});

async function connected(options: Partial<LockEngineOptions> = {}) {
  const engine = new LockEngine({
    nodes: [redis.nodes[0].url],
    logger: quietLogger(),
    ...options,
  });
  engines.push(engine);
  await engine.connect();
  return engine;
}

function thrownBy(run: () => unknown): unknown {
  try {
    run();
  } catch (error) {
    return error;
  }
  return undefined;
}

// lib/engine/lock-options.ts checkUrl() accepts any URL that `new URL()` parses; ioredis then
// decodes the credentials with decodeURIComponent and turns query parameters into options.
describe('engine options', () => {
  it.each([
    ['a malformed percent-escape in the password', 'redis://:%E0%A4@127.0.0.1:6379'],
    ['a malformed percent-escape in the user name', 'redis://us%ZZer:pw@127.0.0.1:6379'],
    ['a sentinels query parameter without a name', 'redis://127.0.0.1:6379/0?sentinels=a'],
    ['a sentinels query parameter with a name', 'redis://127.0.0.1:6379/0?sentinels=a&name=m'],
  ])('refuses a URL with %s with a LockOptionsError naming nodes[0]', (_, url) => {
    // Before the fix: URIError 'URI malformed', Error 'Requires the name of master.' or
    // TypeError 'sentinels.map is not a function', thrown by new Redis() in LockNode.from.
    const error = thrownBy(() => new LockEngine({ nodes: [url] }));
    expect(error).toBeInstanceOf(LockOptionsError);
    expect((error as Error).message).toContain('nodes[0]');
    expect((error as Error).message).not.toContain('%E0%A4');
  });
});

// Node clamps a timer longer than 2^31 - 1 ms (24.8 days) to 1 ms. checkMs() in
// lib/engine/lock-options.ts accepts up to Number.MAX_SAFE_INTEGER.
describe('durations beyond Node timers', () => {
  const beyond = 2 ** 32;

  it('a ttl above 2^31 - 1 ms is refused, or the lock it grants stays held (its signal does not abort at once)', async () => {
    const engine = await connected();
    const outcome = await engine
      .tryAcquire(unique('long-ttl'), { ttl: beyond })
      .catch((error: unknown) => error);
    if (outcome instanceof Lock) {
      const { signal } = outcome; // arms the expiry timer (lib/engine/lock.ts armExpiry)
      await new Promise((resolve) => setTimeout(resolve, 100));
      const aborted = signal.aborted;
      await outcome.release();
      expect(aborted).toBe(false);
    } else {
      expect(outcome).toBeInstanceOf(LockOptionsError);
      expect((outcome as Error).message).toContain('ttl');
    }
  });

  it('a ttl above 2^31 - 1 ms in using() is refused, or extended no more than once in 200 ms', async () => {
    // Before the fix: keepExtended() (lib/engine/lock-engine.ts) schedules every extension 1 ms apart.
    const engine = await connected();
    let extensions = 0;
    engine.on('extended', () => extensions++);
    const outcome = await engine
      .using(unique('extend-storm'), () => new Promise((resolve) => setTimeout(resolve, 200)), {
        ttl: 3e10,
      })
      .catch((error: unknown) => error);
    if (outcome instanceof LockOptionsError) expect(outcome.message).toContain('ttl');
    else expect(extensions).toBeLessThanOrEqual(1);
  });

  it('a waitTimeout above 2^31 - 1 ms is refused, or a second waiter of one process does not poll the nodes every millisecond', async () => {
    // Before the fix: Ticket.wait() (lib/engine/wait-queue.ts) sets setTimeout(deadline - now) for a
    // waiter behind the head: 229 busy attempts in 300 ms instead of 3.
    const engine = await connected();
    const holder = await connected();
    const resource = unique('long-wait');
    const lock = await holder.tryAcquire(resource);
    let attempts = 0;
    engine.on('contended', () => attempts++);
    const retry = { delay: 1000, maxDelay: 1000, factor: 1, jitter: 0 };
    const first = engine.acquire(resource, { waitTimeout: beyond, retry }).catch((e: unknown) => e);
    const second = engine
      .acquire(resource, { waitTimeout: beyond, retry })
      .catch((e: unknown) => e);
    await new Promise((resolve) => setTimeout(resolve, 300));
    await lock.release();
    const outcomes = [await first];
    if (outcomes[0] instanceof Lock) await outcomes[0].release();
    outcomes.push(await second);
    if (outcomes[1] instanceof Lock) await outcomes[1].release();
    if (outcomes.every((o) => o instanceof LockOptionsError)) return;
    expect(attempts).toBeLessThan(20);
  });
});

// normalizeResources() in lib/engine/lock-engine.ts checks type and length only. ioredis
// writes strings as UTF-8, where every lone surrogate becomes U+FFFD: distinct names, one key.
// (lib/nest/locked/lock-key.ts refuses lone surrogates in template values for the same reason.)
describe('resource names', () => {
  it('never makes two distinct resource names contend: names with lone surrogates are refused or kept apart', async () => {
    const engine = await connected();
    const first = await engine.tryAcquire('a\uD800').catch((error: unknown) => error);
    if (first instanceof LockOptionsError) return;
    const second = await engine.tryAcquire('a\uD801').catch((error: unknown) => error);
    await (first as Lock).release();
    if (second instanceof Lock) await second.release();
    // Before the fix: LockBusyError, "'a\uFFFD' is locked by another holder".
    expect(second instanceof Lock || second instanceof LockOptionsError).toBe(true);
  });
});

describe('extend(), release() and admin look-ups', () => {
  it.each([null, undefined])(
    'extend(%s) rejects with a LockOptionsError, not a TypeError',
    async (value) => {
      // lib/engine/lock-engine.ts extend(lock, ttl = lock.ttl): the default reads lock.ttl
      // before checkOwn(lock) runs.
      const engine = await connected();
      const error = await engine.extend(value as unknown as Lock).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(LockOptionsError);
    },
  );

  it.each([
    ['release', (e: LockEngine) => e.release({} as Lock)],
    ['inspect', (e: LockEngine) => e.inspect('')],
    ['forceRelease', (e: LockEngine) => e.forceRelease('')],
  ])(
    '%s() with a bad argument returns a rejected promise instead of throwing synchronously',
    async (_, call) => {
      // Before the fix they throw LockOptionsError at once: `engine.release(x).catch(...)` does not catch it.
      const engine = await connected();
      let result: unknown;
      expect(() => (result = call(engine))).not.toThrow();
      await expect(result).rejects.toBeInstanceOf(LockOptionsError);
    },
  );

  it('list() rejects with LockUnavailableError when no node could be listed, instead of resolving []', async () => {
    // lib/engine/lock-admin.ts list(): Promise.allSettled drops every failure.
    const node = redis.nodes[0];
    await node.cli('ACL', 'SETUSER', 'noscan', 'reset', 'on', '>pw', '~lock:*', '+@all', '-scan');
    const engine = new LockEngine({
      nodes: [`redis://noscan:pw@${node.host}:${node.port}`],
      logger: quietLogger(),
    });
    engines.push(engine);
    await engine.connect();
    const lock = await engine.tryAcquire(unique('listed'));
    const outcome = await engine.list().catch((error: unknown) => error);
    await lock.release();
    expect(outcome).toBeInstanceOf(LockUnavailableError);
  });
});

describe('per-call options', () => {
  it('refuses a misspelt per-call option (tll) as the engine options and @Locked() do', async () => {
    // lib/engine/lock-engine.ts request() reads the known keys and ignores the rest: a typo
    // silently takes the default ttl (5 s) instead of the intended one.
    const engine = await connected();
    const outcome = await engine
      .tryAcquire(unique('typo'), { tll: 60_000 } as never)
      .catch((error: unknown) => error);
    if (outcome instanceof Lock) await outcome.release();
    expect(outcome).toBeInstanceOf(LockOptionsError);
    expect((outcome as Error).message).toContain("'tll'");
  });

  it('refuses an autoExtend in using() that is not true or false, as @Locked() does', async () => {
    // lib/engine/lock-engine.ts using(): `options.autoExtend !== false`, so 'no' extends.
    const engine = await connected();
    const outcome = await engine
      .using(unique('auto'), () => 'ran', { autoExtend: 'no' as never })
      .catch((error: unknown) => error);
    expect(outcome).toBeInstanceOf(LockOptionsError);
  });
});

// lib/nest/module/redis-lock.module.ts connects LockService in its factory; LockedMethodsExplorer
// (lib/nest/locked/locked-methods.explorer.ts) checks `locked` only afterwards, in its constructor.
// Nest runs no shutdown hook for an application that failed to start, so the connections
// stay open and keep the process alive (Jest never exits).
describe('RedisLockModule start-up', () => {
  let admin: Redis;
  beforeAll(async () => {
    admin = new Redis(redis.nodes[0].url, { disconnectTimeout: 100 });
    await admin.ping();
  });
  afterAll(async () => {
    await admin.quit();
  });

  const clientCount = async () =>
    String(await admin.call('CLIENT', 'LIST', 'TYPE', 'normal'))
      .trim()
      .split('\n').length;

  it.each([
    ['a ttl below 10 ms', { ttl: 5 }, 'ttl'],
    ['a non-boolean autoExtend', { autoExtend: 'yes' }, 'autoExtend'],
    ['onBusy, which belongs to one method', { onBusy: () => 'busy' }, 'onBusy'],
  ])(
    'refuses locked defaults with %s before connecting, leaving no connection open',
    async (_, locked, option) => {
      const before = await clientCount();
      @Module({
        imports: [
          RedisLockModule.forRoot({
            nodes: [redis.nodes[0].url],
            logger: quietLogger(),
            locked: locked as never,
          }),
        ],
      })
      class DefaultsModule {}
      const error = await NestFactory.createApplicationContext(DefaultsModule, {
        logger: false,
        abortOnError: false,
      }).then(
        async (app) => {
          await app.close();
          return undefined;
        },
        (caught: unknown) => caught,
      );
      expect(error).toBeInstanceOf(LockOptionsError);
      expect((error as Error).message).toContain('RedisLockModule locked defaults');
      expect((error as Error).message).toContain(option);
      expect(await clientCount()).toBe(before);
    },
  );
});

// lib/engine/lock-node.ts close(): `await client.quit()` waits for a reply a stopped node never
// sends; only the wait for 'end' after it is bounded.
describe('closing with a node that does not answer', () => {
  it('close() resolves within 2 s while a node is paused with SIGSTOP', async () => {
    const node = await RedisNodeProcess.start();
    try {
      const engine = new LockEngine({ nodes: [node.url], logger: quietLogger() });
      await engine.connect();
      await node.pause();
      const closed = engine.close().then(() => 'closed');
      const outcome = await Promise.race([
        closed,
        new Promise((resolve) => setTimeout(resolve, 2000, 'still open')),
      ]);
      await node.resume();
      await closed;
      expect(outcome).toBe('closed');
    } finally {
      await node.stop();
    }
  });
});

// lib/engine/node-checks.ts readNodeFacts(): CONFIG GET failures become `undefined` silently.
describe('start-up checks', () => {
  it('warns that appendfsync could not be checked when CONFIG GET is denied', async () => {
    const node = await RedisNodeProcess.start({ appendfsync: 'everysec' });
    try {
      await node.cli(
        'ACL',
        'SETUSER',
        'noconfig',
        'reset',
        'on',
        '>pw',
        '~*',
        '&*',
        '+@all',
        '-config',
      );
      const logger = quietLogger();
      const engine = new LockEngine({
        nodes: [`redis://noconfig:pw@${node.host}:${node.port}`],
        logger,
      });
      await engine.connect();
      await engine.close();
      // Before the fix: no warning at all, although this node runs appendfsync everysec.
      expect(logger.warnings.join('\n')).toMatch(/appendfsync|CONFIG/);
    } finally {
      await node.stop();
    }
  });
});
