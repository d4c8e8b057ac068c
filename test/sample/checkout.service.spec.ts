/**
 * A unit test of the sample's CheckoutService as an application would write
 * one: Test.createTestingModule() with RedisLockTestingModule in place of
 * RedisLockModule, a throwaway SQLite store, and no Redis. The lock's hooks
 * stand in for the other app instances.
 */
import 'reflect-metadata';
import { afterEach, beforeEach, describe, expect, it, jest } from '@jest/globals';
import { Test, type TestingModule } from '@nestjs/testing';
import { LockTimeoutError } from 'nestjs-redis-lock';
import { InMemoryLockEngine, RedisLockTestingModule } from 'nestjs-redis-lock/testing';
import {
  flashSaleConfig,
  type FlashSaleConfig,
} from '../../sample/flash-sale/flash-sale.config.js';
import { StaleTokenException } from '../../sample/flash-sale/flash-sale.errors.js';
import { PaymentsService } from '../../sample/flash-sale/payments/payments.service.js';
import { CheckoutService } from '../../sample/flash-sale/products/checkout.service.js';
import { FlashSaleStore } from '../../sample/flash-sale/store/flash-sale.store.js';

describe('CheckoutService (unit, with RedisLockTestingModule)', () => {
  let moduleRef: TestingModule;
  let checkout: CheckoutService;
  let store: FlashSaleStore;
  let locks: InMemoryLockEngine;

  async function start(paymentMs: number): Promise<void> {
    store = FlashSaleStore.open(':memory:');
    store.seed(1, 'Limited sneakers', 10);
    const config: FlashSaleConfig = { ...flashSaleConfig(), paymentMs, instance: 'unit' };
    moduleRef = await Test.createTestingModule({
      imports: [RedisLockTestingModule.forRoot()],
      providers: [
        CheckoutService,
        PaymentsService,
        { provide: FlashSaleStore, useValue: store },
        { provide: flashSaleConfig.KEY, useValue: config },
      ],
    }).compile();
    await moduleRef.init();
    checkout = moduleRef.get(CheckoutService);
    locks = moduleRef.get(InMemoryLockEngine);
  }

  afterEach(async () => {
    jest.useRealTimers();
    await moduleRef.close();
    store.close();
  });

  describe('with a payment that answers at once', () => {
    beforeEach(() => start(0));

    it('sells one unit under the product’s lock and writes the sale with its fencing token', async () => {
      const sale = await checkout.buy(1);
      const [grant] = locks.grants('product:1');
      expect(grant).toMatchObject({ resources: ['product:1'], by: 'engine' });
      expect(sale).toMatchObject({ productId: 1, stockLeft: 9, token: grant!.token });
      expect(store.product(1)?.stock).toBe(9);
      expect(locks.isLocked('product:1')).toBe(false);
    });

    it('a buyer who finds the product locked by another instance waits a second, then gives up selling nothing', async () => {
      jest.useFakeTimers();
      locks.hold('product:1', { ttl: 30_000 });
      const buying = checkout.buy(1).catch((e: unknown) => e);
      await jest.advanceTimersByTimeAsync(1_000);
      const error = await buying;
      // The lock-context interceptor answers this 409 with Retry-After (the lease left, 29 s).
      expect(error).toBeInstanceOf(LockTimeoutError);
      expect((error as LockTimeoutError).retryAfter).toBe(29_000);
      expect(store.product(1)?.stock).toBe(10);
    });
  });

  describe('with a slow payment', () => {
    beforeEach(() => start(50));

    it('a buyer whose lease ran out mid-payment cannot write: the next holder’s token claimed the row', async () => {
      const granted = new Promise((resolve) => locks.once('acquired', resolve));
      const late = checkout.buy(1).catch((e: unknown) => e);
      await granted;
      locks.expire('product:1'); // the first buyer's process stalls past its lease
      const next = await checkout.buy(1);
      expect(await late).toBeInstanceOf(StaleTokenException);
      const [first, second] = locks.grants('product:1');
      expect(second!.token).toBeGreaterThan(first!.token!);
      expect(next).toMatchObject({ stockLeft: 9, token: second!.token });
      expect(store.product(1)?.stock).toBe(9);
    });
  });
});
