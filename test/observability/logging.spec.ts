import 'reflect-metadata';
import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import {
  Controller,
  Get,
  Module,
  Param,
  type DynamicModule,
  type INestApplication,
  type INestApplicationContext,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ExpressAdapter } from '@nestjs/platform-express';
import { Redis } from 'ioredis';
import {
  LockBusyError,
  LockClosingError,
  LockEngine,
  LockOptionsError,
  LockService,
  LockUnavailableError,
  Locked,
  RedisLockModule,
  type LockLogging,
  type RedisLockModuleOptions,
} from '../../lib/index.js';
import { LogCapture } from '../support/log-capture.js';
import { nextLockEvent } from '../support/lock-events.js';
import { quietLogger } from '../support/quiet-logger.js';
import {
  startRedisNodes,
  stopRedisNodes,
  type RedisNodeProcess,
} from '../../dev/redis/redis-nodes.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';

const redis = useRedisNodes(3);
let counter = 0;
const unique = (name: string) => `logs:${name}:${++counter}`;

@Controller('jobs')
class JobsController {
  @Get(':id')
  @Locked('job:<0>', { wait: false })
  async run(@Param('id') id: string): Promise<{ id: string }> {
    return { id };
  }
}

function appModule(options: RedisLockModuleOptions, http = false): DynamicModule {
  @Module({})
  class AppModule {}
  return {
    module: AppModule,
    imports: [RedisLockModule.forRoot(options)],
    controllers: http ? [JobsController] : [],
  };
}

/** Takes the lock's keys on every node, so its next extension finds it lost. */
async function takeOver(resource: string): Promise<void> {
  const admin = redis.nodes.map((n) => new Redis(n.url));
  await Promise.all(admin.map((c) => c.set(`lock:{${resource}}`, 'intruder', 'PX', 10_000)));
  await Promise.all(admin.map((c) => c.quit()));
}

describe('log lines through the Nest Logger', () => {
  let app: INestApplicationContext | undefined;
  let rival: LockEngine;

  beforeAll(async () => {
    rival = new LockEngine({ nodes: redis.nodes.map((n) => n.url), logger: quietLogger() });
    await rival.connect();
  });
  afterEach(async () => {
    await app?.close();
    app = undefined;
  });
  afterAll(() => rival.close());

  async function start(logging?: LockLogging): Promise<{ locks: LockService; logs: LogCapture }> {
    const logs = new LogCapture();
    const options: RedisLockModuleOptions = { nodes: redis.nodes.map((n) => n.url) };
    if (logging !== undefined) options.logging = logging;
    app = await NestFactory.createApplicationContext(appModule(options), { logger: logs });
    return { locks: app.get(LockService), logs };
  }

  it("with logging: 'debug', logs each acquisition, contention, extension, release and busy attempt at debug level, naming resource and token but never the lock's value", async () => {
    const { locks, logs } = await start('debug');
    const resource = unique('debug');
    const lock = await locks.acquire(resource);
    // A lease of its own (the lock's ttl is 5000): the line gives the lease this extension set.
    await lock.extend(7000);
    await lock.release();

    const held = await rival.acquire(resource);
    await expect(locks.tryAcquire(resource)).rejects.toBeInstanceOf(LockBusyError);
    const contended = nextLockEvent(locks, 'contended', resource);
    const waiting = locks.acquire(resource);
    await contended;
    await held.release();
    await (await waiting).release();

    const lines = logs.of('RedisLock');
    expect(new Set(lines.map((l) => l.level))).toEqual(new Set(['debug']));
    const messages = lines.map((l) => l.message);
    const token = `(token ${lock.token})`;
    expect(messages.slice(0, 3)).toEqual([
      expect.stringMatching(
        new RegExp(
          `^Acquired '${resource}' \\${token.slice(0, -1)}\\) in \\d+ ms after 1 attempt\\(s\\); [23] of 3 node\\(s\\) granted it\\.$`,
        ),
      ),
      expect.stringMatching(new RegExp(`^Extended '${resource}' .* by 7000 ms in \\d+ ms\\.$`)),
      expect.stringMatching(new RegExp(`^Released '${resource}' .* after \\d+ ms\\.$`)),
    ]);
    expect(messages[0]).toContain(token);
    expect(messages).toContainEqual(
      expect.stringMatching(new RegExp(`^'${resource}' is locked by another holder`)),
    );
    expect(messages).toContainEqual(
      expect.stringMatching(new RegExp(`^'${resource}' busy at attempt 1; the holder's lease`)),
    );
    expect(messages.filter((m) => m.startsWith('Acquired'))).toHaveLength(2);
    expect(messages.filter((m) => m.startsWith('Released'))).toHaveLength(2);
    expect(logs.text).not.toContain(lock.value);
  });

  it('by default logs no line for locks taken and released, and a lost lock as a warning', async () => {
    const { locks, logs } = await start();
    const resource = unique('default');
    await (await locks.acquire(resource)).release();
    expect(logs.of('RedisLock')).toEqual([]);

    const lock = await locks.acquire(resource);
    await takeOver(resource);
    await expect(lock.extend()).rejects.toThrow('Lost the lock');
    await lock.release();
    expect(logs.of('RedisLock').map((l) => [l.level, l.message])).toEqual([
      [
        'warn',
        expect.stringMatching(
          new RegExp(
            `^'${resource}' \\(token ${lock.token}\\) lost after \\d+ ms: Lost the lock on '${resource}': the nodes no longer hold it`,
          ),
        ),
      ],
    ]);
  });

  it('with logging: false, logs nothing about lost locks', async () => {
    const { locks, logs } = await start(false);
    const resource = unique('silent');
    const lock = await locks.acquire(resource);
    await takeOver(resource);
    await expect(lock.extend()).rejects.toThrow('Lost the lock');
    await lock.release();
    expect(logs.of('RedisLock')).toEqual([]);
  });

  it('refuses an unknown logging level at start-up with a LockOptionsError that lists the levels', async () => {
    const started = NestFactory.createApplicationContext(
      appModule({ nodes: [redis.nodes[0].url], logging: 'info' as LockLogging }),
      { logger: false, abortOnError: false },
    );
    await expect(started).rejects.toThrow(LockOptionsError);
    await expect(started).rejects.toThrow(
      "logging must be 'warn' (the default: lost locks and outages), 'debug' (every acquisition and release too) or false (got 'info').",
    );
  });

  it.each([['warn' as const], [false as const]])(
    'logs only the first acquisition refused during a shutdown, as a warning, and the 503s answered meanwhile as no error (logging: %s)',
    async (logging) => {
      const logs = new LogCapture();
      const http = await NestFactory.create(
        appModule({ nodes: redis.nodes.map((n) => n.url), logging }, true),
        new ExpressAdapter(),
        { logger: logs },
      );
      app = http;
      await http.listen(0, '127.0.0.1');
      const base = (await http.getUrl()).replace('[::1]', '127.0.0.1');
      const locks = http.get(LockService);
      // A lock still held keeps the drain going while requests arrive.
      const held = await locks.acquire(unique('drain'));
      const draining = locks.drain(10_000);
      const statuses: number[] = [];
      for (const id of [`d${counter}`, `e${counter}`])
        statuses.push((await fetch(`${base}/jobs/${id}`)).status);
      await expect(locks.tryAcquire(unique('late'))).rejects.toBeInstanceOf(LockClosingError);
      expect(statuses).toEqual([503, 503]);
      await held.release();
      await draining;
      const lines = logs.of('RedisLock').map((l) => [l.level, l.message]);
      expect(lines).toEqual(
        logging === false
          ? []
          : [
              [
                'warn',
                expect.stringMatching(
                  /^Shutting down: new locks are refused \(503 over HTTP\) until the lock service has stopped; the first was 'job:d\d+', the others are logged at debug level\.$/,
                ),
              ],
            ],
      );
    },
  );

  describe('during an outage (two nodes of three down)', () => {
    let down: RedisNodeProcess[];
    let http: INestApplication | undefined;

    beforeAll(async () => {
      down = await startRedisNodes(2);
      await Promise.all(down.map((n) => n.kill()));
    });
    afterEach(async () => {
      await http?.close();
      http = undefined;
    });
    afterAll(() => stopRedisNodes(down));

    async function startHttp(logging?: LockLogging): Promise<{ base: string; logs: LogCapture }> {
      const logs = new LogCapture();
      const options: RedisLockModuleOptions = {
        nodes: [redis.nodes[0].url, ...down.map((n) => n.url)],
      };
      if (logging !== undefined) options.logging = logging;
      http = await NestFactory.create(appModule(options, true), new ExpressAdapter(), {
        logger: logs,
      });
      await http.listen(0, '127.0.0.1');
      return { base: (await http.getUrl()).replace('[::1]', '127.0.0.1'), logs };
    }

    it('warns at start-up that too few nodes are reachable, and logs a failed acquisition as an error once, also when it became a 503', async () => {
      const { base, logs } = await startHttp();
      const startUp = logs.of('RedisLock', 'warn').map((l) => l.message);
      expect(startUp).toEqual([
        expect.stringMatching(
          /^2 of 3 node\(s\) unreachable at start-up .*: fewer than the quorum of 2, so no lock can be granted until they return\.$/,
        ),
      ]);

      const service = http!.get(LockService);
      const error = await service.tryAcquire(unique('outage')).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(LockUnavailableError);
      expect(logs.of('RedisLock', 'error').map((l) => l.message)).toEqual([
        (error as Error).message,
      ]);

      logs.clear();
      const response = await fetch(`${base}/jobs/7`);
      expect(response.status).toBe(503);
      const errors = logs.of('RedisLock', 'error').map((l) => l.message);
      expect(errors).toEqual([
        expect.stringMatching(/^Could not lock 'job:7': 2 of 3 Redis nodes/),
      ]);
    });

    it('with logging: false, the 503 is still logged once, by the interceptor', async () => {
      const { base, logs } = await startHttp(false);
      const response = await fetch(`${base}/jobs/8`);
      expect(response.status).toBe(503);
      expect(logs.of('RedisLock', 'error').map((l) => l.message)).toEqual([
        expect.stringMatching(/^Could not lock 'job:8'/),
      ]);
    });
  });
});
