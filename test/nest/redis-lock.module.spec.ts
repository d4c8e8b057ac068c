import 'reflect-metadata';
import { afterEach, describe, expect, it } from '@jest/globals';
import { Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { ConfigModule, ConfigService } from '@nestjs/config';
import { Test } from '@nestjs/testing';
import { Redis } from 'ioredis';
import {
  LockBusyError,
  LockOptionsError,
  LockService,
  RedisLockModule,
  type RedisLockModuleOptions,
  type RedisLockOptionsFactory,
} from '../../lib/index.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';
import { quietLogger } from '../support/quiet-logger.js';

const redis = useRedisNodes(3);
const nodeUrls = () => redis.nodes.map((n) => n.url);

@Injectable()
class OrdersService {
  constructor(readonly locks: LockService) {}
}

@Injectable()
class LockOptionsFactory implements RedisLockOptionsFactory {
  createRedisLockOptions(): RedisLockModuleOptions {
    return { nodes: nodeUrls(), ttl: 1234, logger: quietLogger() };
  }
}

@Module({ providers: [LockOptionsFactory], exports: [LockOptionsFactory] })
class LockOptionsModule {}

describe('RedisLockModule', () => {
  let app: INestApplicationContext | undefined;
  afterEach(async () => {
    await app?.close();
    app = undefined;
  });

  async function start(
    imports: unknown[],
    providers: unknown[] = [],
  ): Promise<INestApplicationContext> {
    const moduleRef = await Test.createTestingModule({
      imports: imports as never[],
      providers: providers as never[],
    }).compile();
    app = moduleRef;
    await moduleRef.init();
    return moduleRef;
  }

  async function expectWorkingLocks(locks: LockService): Promise<void> {
    const lock = await locks.acquire('module:order:1');
    await expect(locks.tryAcquire('module:order:1')).rejects.toBeInstanceOf(LockBusyError);
    expect((await lock.release()).released).toBe(true);
  }

  it('forRoot registers a LockService that takes locks on the configured nodes', async () => {
    const ref = await start([
      RedisLockModule.forRoot({ nodes: nodeUrls(), logger: quietLogger() }),
    ]);
    const locks = ref.get(LockService);
    expect(locks.nodes).toHaveLength(3);
    expect(locks.quorum).toBe(2);
    await expectWorkingLocks(locks);
  });

  it('forRootAsync with useFactory reads its options from injected providers (ConfigService)', async () => {
    const ref = await start([
      ConfigModule.forRoot({
        ignoreEnvFile: true,
        load: [() => ({ LOCK_NODES: nodeUrls().join(','), LOCK_TTL: '2500' })],
      }),
      RedisLockModule.forRootAsync({
        imports: [ConfigModule],
        inject: [ConfigService],
        useFactory: (config: ConfigService) => ({
          nodes: config.getOrThrow<string>('LOCK_NODES').split(','),
          ttl: Number(config.getOrThrow<string>('LOCK_TTL')),
          logger: quietLogger(),
        }),
      }),
    ]);
    const locks = ref.get(LockService);
    expect(locks.options.ttl).toBe(2500);
    await expectWorkingLocks(locks);
  });

  it('forRootAsync with useClass builds its options with that class', async () => {
    const ref = await start([RedisLockModule.forRootAsync({ useClass: LockOptionsFactory })]);
    const locks = ref.get(LockService);
    expect(locks.options.ttl).toBe(1234);
    await expectWorkingLocks(locks);
  });

  it('forRootAsync with useExisting reuses a provider from an imported module', async () => {
    const ref = await start([
      RedisLockModule.forRootAsync({
        imports: [LockOptionsModule],
        useExisting: LockOptionsFactory,
      }),
    ]);
    expect(ref.get(LockService).options.ttl).toBe(1234);
  });

  it('isGlobal makes LockService injectable in modules that do not import RedisLockModule', async () => {
    @Module({ providers: [OrdersService] })
    class OrdersModule {}
    const ref = await start([
      RedisLockModule.forRoot({ nodes: nodeUrls(), isGlobal: true, logger: quietLogger() }),
      OrdersModule,
    ]);
    const orders = ref.get(OrdersService);
    expect(orders.locks).toBe(ref.get(LockService));
  });

  it('without isGlobal, LockService is only injectable where the module is imported', async () => {
    @Module({ providers: [OrdersService] })
    class OrdersModule {}
    // A failed compile runs no shutdown hook, so the nodes are clients this test owns and closes.
    const own = redis.nodes.map((n) => new Redis(n.url));
    const builder = Test.createTestingModule({
      imports: [RedisLockModule.forRoot({ nodes: own, logger: quietLogger() }), OrdersModule],
    });
    await expect(builder.compile()).rejects.toThrow(/LockService/);
    await Promise.all(own.map((c) => c.quit()));

    @Module({
      imports: [RedisLockModule.forRoot({ nodes: nodeUrls(), logger: quietLogger() })],
      providers: [OrdersService],
    })
    class ImportingModule {}
    const ref = await start([ImportingModule]);
    await expectWorkingLocks(ref.get(OrdersService).locks);
  });

  it('rejects invalid options at start-up with a LockOptionsError that says what to change', async () => {
    const builder = Test.createTestingModule({
      imports: [RedisLockModule.forRoot({ nodes: nodeUrls(), ttl: 0 })],
    });
    const error = await builder.compile().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockOptionsError);
    expect((error as Error).message).toMatch(/ttl must be a whole number of milliseconds from 10/);
  });

  it("names every option it takes, its own and the engine's, when given one it does not know", async () => {
    const builder = Test.createTestingModule({
      imports: [RedisLockModule.forRoot({ nodes: nodeUrls(), contextInterceptr: false } as never)],
    });
    const error = await builder.compile().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockOptionsError);
    const message = (error as Error).message;
    expect(message).toContain("RedisLockModule options has no option 'contextInterceptr'");
    for (const option of ['locked', 'contextInterceptor', 'logging', 'isGlobal', 'ttl', 'nodes']) {
      expect(message).toContain(option);
    }
  });

  it('says where isGlobal goes when a forRootAsync() factory returns it', async () => {
    const builder = Test.createTestingModule({
      imports: [
        RedisLockModule.forRootAsync({
          useFactory: () => ({ nodes: nodeUrls(), isGlobal: true }) as never,
        }),
      ],
    });
    const error = await builder.compile().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockOptionsError);
    expect((error as Error).message).toBe(
      'isGlobal is an option of RedisLockModule.forRootAsync() itself, not of the options its factory returns: ' +
        'write RedisLockModule.forRootAsync({ isGlobal: true, useFactory: ... }).',
    );
  });

  it('closes the connections it opened on shutdown and leaves the clients it was given open', async () => {
    const own = new Redis(redis.nodes[0].url);
    const ref = await start([
      RedisLockModule.forRoot({
        nodes: [own, redis.nodes[1].url, redis.nodes[2].url],
        logger: quietLogger(),
      }),
    ]);
    const locks = ref.get(LockService);
    await expectWorkingLocks(locks);
    const opened = locks.nodes.slice(1).map((n) => n.client);
    await ref.close();
    app = undefined;
    expect(opened.map((c) => c.status)).toEqual(['end', 'end']);
    expect(own.status).toBe('ready');
    expect(await own.ping()).toBe('PONG');
    await own.quit();
  });
});
