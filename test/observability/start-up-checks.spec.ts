import 'reflect-metadata';
import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { Module, type DynamicModule, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import {
  LockConfigurationError,
  LockService,
  RedisLockModule,
  type RedisLockModuleOptions,
} from '../../lib/index.js';
import { LogCapture } from '../support/log-capture.js';
import {
  startRedisNodes,
  stopRedisNodes,
  type RedisNodeProcess,
} from '../../dev/redis/redis-nodes.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';

const safe = useRedisNodes(3);
const label = (node: RedisNodeProcess) => `${node.host}:${node.port}`;

/** An app whose only module is RedisLockModule, without a `logger` option: Nest's Logger it is. */
function appModule(options: RedisLockModuleOptions): DynamicModule {
  @Module({})
  class AppModule {}
  return { module: AppModule, imports: [RedisLockModule.forRoot(options)] };
}

describe('start-up checks through the Nest Logger', () => {
  let noAof: RedisNodeProcess;
  let app: INestApplicationContext | undefined;

  beforeAll(async () => {
    [noAof] = await startRedisNodes(1, { appendonly: false });
  });
  afterEach(async () => {
    await app?.close();
    app = undefined;
  });
  afterAll(() => stopRedisNodes([noAof]));

  it('logs a risky node set-up (appendonly off, an even node count) as warnings of the RedisLock context when the app starts', async () => {
    const logs = new LogCapture();
    app = await NestFactory.createApplicationContext(
      appModule({ nodes: [...safe.nodes.map((n) => n.url), noAof.url] }),
      { logger: logs },
    );
    const warnings = logs.of('RedisLock', 'warn').map((l) => l.message);
    expect(warnings).toEqual(
      expect.arrayContaining([
        '4 nodes tolerate no more failures than 3: a quorum needs 3. Use an odd number of nodes.',
        `node ${label(noAof)} has appendonly off: a restart empties it, so a lock that stood on it and on no more than a quorum can be granted to a second holder (fence counters it lost restart from the clock, so tokens keep rising). Set appendonly yes and appendfsync always.`,
      ]),
    );
    expect(warnings).toHaveLength(2);
    // Warned about, not refused: the app runs and takes locks.
    const lock = await app.get(LockService).acquire('start-up:warned');
    expect((await lock.release()).released).toBe(true);
  });

  it('logs nothing at start-up for well-configured nodes', async () => {
    const logs = new LogCapture();
    app = await NestFactory.createApplicationContext(
      appModule({ nodes: safe.nodes.map((n) => n.url) }),
      { logger: logs },
    );
    expect(logs.of('RedisLock')).toEqual([]);
  });

  it('refuses to start the app with strict: true, with a LockConfigurationError that names the risk', async () => {
    const logs = new LogCapture();
    const started = NestFactory.createApplicationContext(
      appModule({ nodes: [safe.nodes[0].url, safe.nodes[1].url, noAof.url], strict: true }),
      { logger: logs, abortOnError: false },
    );
    const error = await started.then(
      (ctx) => {
        app = ctx;
        return undefined;
      },
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(LockConfigurationError);
    expect((error as Error).message).toContain(
      `Refusing to start (strict mode): node ${label(noAof)} has appendonly off`,
    );
    // Refused, so nothing was merely warned about.
    expect(logs.of('RedisLock', 'warn')).toEqual([]);
  });
});
