/**
 * RedisLockTestingModule in Test.createTestingModule(): `@Locked()` methods
 * and LockService run on the in-memory engine with the real Nest layer, and it
 * takes RedisLockModule's place in an application module.
 */
import 'reflect-metadata';
import { afterEach, describe, expect, it } from '@jest/globals';
import { Controller, Injectable, Module, Param, ParseIntPipe, Post } from '@nestjs/common';
import { Test, type TestingModule } from '@nestjs/testing';
import type { INestApplication } from '@nestjs/common';
import {
  FencingToken,
  LockBusyError,
  LockService,
  LockSetupError,
  Locked,
  LockOptionsError,
  RedisLockModule,
  isLockFailure,
} from '../../lib/index.js';
import { readWriteLock, semaphore } from '../../lib/engine/index.js';
import { InMemoryLockEngine, RedisLockTestingModule } from '../../lib/testing/index.js';

@Injectable()
class Payments {
  constructor(readonly locks: LockService) {}

  @Locked('order:<0>', { wait: false })
  async pay(orderId: number, @FencingToken() token?: number): Promise<number | undefined> {
    return token;
  }

  refund(orderId: number): Promise<string> {
    return this.locks.using(`order:${orderId}`, () => 'refunded', { waitTimeout: 0 });
  }
}

@Controller('orders')
class OrdersController {
  constructor(private readonly payments: Payments) {}

  @Post(':id/pay')
  pay(@Param('id', ParseIntPipe) id: number) {
    return this.payments.pay(id);
  }
}

const closing: (TestingModule | INestApplication)[] = [];
afterEach(async () => {
  for (const closable of closing.splice(0)) await closable.close();
});

async function compile(imports: Parameters<typeof Test.createTestingModule>[0]) {
  const moduleRef = await Test.createTestingModule(imports).compile();
  closing.push(moduleRef);
  return moduleRef;
}

describe('RedisLockTestingModule', () => {
  it('runs @Locked() methods and LockService on the in-memory engine, with tokens a test can read back', async () => {
    const moduleRef = await compile({
      imports: [RedisLockTestingModule.forRoot()],
      providers: [Payments],
    });
    await moduleRef.init();
    const payments = moduleRef.get(Payments);
    const locks = moduleRef.get(InMemoryLockEngine);
    expect(moduleRef.get(LockService)).toBe(locks);

    const first = await payments.pay(1);
    const second = await payments.pay(1);
    expect(second).toBeGreaterThan(first!);
    expect(locks.grants('order:1').map((grant) => grant.token)).toEqual([first, second]);
    expect(await payments.refund(1)).toBe('refunded');
  });

  it('answers a resource held by someone else with LockBusyError, tagged as a lock failure', async () => {
    const moduleRef = await compile({
      imports: [RedisLockTestingModule.forRoot()],
      providers: [Payments],
    });
    await moduleRef.init();
    const locks = moduleRef.get(InMemoryLockEngine);
    locks.hold('order:2', { ttl: 3_000 });

    const fromDecorator = await moduleRef
      .get(Payments)
      .pay(2)
      .catch((e: unknown) => e);
    expect(fromDecorator).toBeInstanceOf(LockBusyError);
    expect(isLockFailure(fromDecorator)).toBe(true);
    const fromService = await moduleRef
      .get(Payments)
      .refund(2)
      .catch((e: unknown) => e);
    expect(fromService).toBeInstanceOf(LockBusyError);
    expect(isLockFailure(fromService)).toBe(true);
  });

  it('runs readWriteLock(locks, ...) and semaphore(locks, ...), as the README writes them, on the in-memory engine', async () => {
    const moduleRef = await compile({
      imports: [RedisLockTestingModule.forRoot()],
      providers: [Payments],
    });
    await moduleRef.init();
    const { locks } = moduleRef.get(Payments);
    const catalogue = readWriteLock(locks, 'catalogue');
    expect(await catalogue.using('read', () => 'page')).toBe('page');
    const permits = semaphore(locks, 'payments-api', 1);
    const held = await permits.acquire();
    await expect(permits.tryAcquire()).rejects.toBeInstanceOf(LockBusyError);
    await held.release();
    // Anything else is refused with what to pass.
    expect(() => readWriteLock({} as never, 'catalogue')).toThrow(
      new LockOptionsError(
        'readWriteLock() takes a LockEngine, or the LockService Nest injects (got an object).',
      ),
    );
  });

  it('gives HTTP handlers the lock-context interceptor: 409 with Retry-After', async () => {
    const moduleRef = await compile({
      imports: [RedisLockTestingModule.forRoot()],
      controllers: [OrdersController],
      providers: [Payments],
    });
    const app = moduleRef.createNestApplication({ logger: false });
    closing.push(app);
    await app.listen(0, '127.0.0.1');
    const url = await app.getUrl();
    moduleRef.get(InMemoryLockEngine).hold('order:3', { ttl: 4_000 });

    const busy = await fetch(`${url}/orders/3/pay`, { method: 'POST' });
    expect(busy.status).toBe(409);
    // Whole seconds of the 4 s lease left when the request came (less on a loaded machine).
    const retryAfter = Number(busy.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(4);
    const free = await fetch(`${url}/orders/4/pay`, { method: 'POST' });
    expect(free.status).toBe(201);
    expect(Number(await free.text())).toBeGreaterThan(0);
  });

  it('replaces the engine of an application module that imports RedisLockModule, which then never connects', async () => {
    // Nodes no test could reach: the real engine must not be the one that locks.
    @Module({
      imports: [RedisLockModule.forRoot({ nodes: ['redis://127.0.0.1:1'], logging: false })],
      controllers: [OrdersController],
      providers: [Payments],
    })
    class AppModule {}

    const locks = new InMemoryLockEngine();
    const moduleRef = await Test.createTestingModule({ imports: [AppModule] })
      .overrideProvider(LockService)
      .useValue(locks)
      .compile();
    closing.push(moduleRef);
    const app = moduleRef.createNestApplication({ logger: false });
    closing.push(app);
    await app.listen(0, '127.0.0.1');
    expect(await moduleRef.get(Payments).pay(5)).toBe(locks.grants('order:5')[0]!.token);

    locks.hold('order:6', { ttl: 2_000 });
    const busy = await fetch(`${await app.getUrl()}/orders/6/pay`, { method: 'POST' });
    expect(busy.status).toBe(409);
    expect(['1', '2']).toContain(busy.headers.get('retry-after'));
  });

  it('without it, a @Locked() method refuses to run unlocked (what the module replaces)', async () => {
    const moduleRef = await compile({
      providers: [Payments, { provide: LockService, useValue: {} }],
    });
    await expect(moduleRef.get(Payments).pay(6)).rejects.toBeInstanceOf(LockSetupError);
  });

  it('checks @Locked() defaults as RedisLockModule does', async () => {
    await expect(
      compile({
        imports: [RedisLockTestingModule.forRoot({ locked: { ttl: -1 } })],
        providers: [Payments],
      }),
    ).rejects.toThrow('RedisLockTestingModule locked defaults');
  });

  it('names itself when refusing an unknown option, as RedisLockModule does', async () => {
    await expect(
      compile({
        imports: [RedisLockTestingModule.forRoot({ ttll: 5000 } as never)],
        providers: [Payments],
      }),
    ).rejects.toThrow(/^RedisLockTestingModule options has no option 'ttll'/);
  });
});
