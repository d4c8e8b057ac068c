import 'reflect-metadata';
import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import {
  Catch,
  Controller,
  Injectable,
  Module,
  Param,
  Post,
  Query,
  Scope,
  SetMetadata,
  UseFilters,
  UseInterceptors,
  type ArgumentsHost,
  type ExceptionFilter,
  type INestApplication,
  type INestApplicationContext,
  type Provider,
} from '@nestjs/common';
import { ContextIdFactory, NestFactory, Reflector } from '@nestjs/core';
import { ExpressAdapter } from '@nestjs/platform-express';
import { Redis } from 'ioredis';
import { Observable, type Subscriber } from 'rxjs';
import {
  CurrentLock,
  FencingToken,
  isLockFailure,
  Lock,
  LockBusyError,
  LockContext,
  LockContextInterceptor,
  LockEngine,
  LockKeyError,
  LockLostError,
  Locked,
  LockOptionsError,
  LockService,
  LockSetupError,
  LockSignal,
  LockTimeoutError,
  RedisLockModule,
  type RedisLockModuleOptions,
} from '../../lib/index.js';
import { deferred, Latches, type Deferred } from '../support/latch.js';
import { countLockEvents, nextLockEvent } from '../support/lock-events.js';
import { quietLogger } from '../support/quiet-logger.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';

const redis = useRedisNodes(3);
const latches = new Latches();
const lockOptions = (extra: Partial<RedisLockModuleOptions> = {}): RedisLockModuleOptions => ({
  nodes: redis.nodes.map((n) => n.url),
  logger: quietLogger(),
  ...extra,
});

// --- Hand-driven streams: a locked Observable method returns one; the test pushes values. ---

const subscribers = new Map<string, Deferred<Subscriber<string>>>();
const tornDown = new Set<string>();

function subscriberOf(id: string): Deferred<Subscriber<string>> {
  let entry = subscribers.get(id);
  if (!entry) subscribers.set(id, (entry = deferred<Subscriber<string>>()));
  return entry;
}

function handDriven(id: string): Observable<string> {
  return new Observable<string>((subscriber) => {
    subscriberOf(id).resolve(subscriber);
    return () => void tornDown.add(id);
  });
}

// --- The application under test -------------------------------------------------------------

/** Called by locked methods: what it sees is what any provider below a @Locked method sees. */
@Injectable()
class AuditService {
  constructor(private readonly lockContext: LockContext) {}

  seen() {
    return {
      injected: this.lockContext.token,
      static: LockContext.token,
      lock: LockContext.lock,
      resources: LockContext.locks.flatMap((l) => l.resources),
    };
  }
}

@Injectable()
class InventoryService {
  /** How many times a locked body ran. */
  runs = 0;

  constructor(private readonly audit: AuditService) {}

  @Locked('item:<0>')
  async reserve(id: string, gate?: string, @FencingToken() token?: number) {
    this.runs++;
    if (gate) await latches.enter(gate);
    return { id, token, seen: this.audit.seen() };
  }

  // A synchronous method does not compile under @Locked(), whose result is a Promise; called
  // from JavaScript (or past a cast), it runs under the lock all the same.
  // @ts-expect-error -- LockedMethodMustReturnAPromiseOrAnObservable
  @Locked('double:<0>')
  double(n: number): number {
    this.runs++;
    return n * 2;
  }

  // @ts-expect-error -- LockedMethodMustReturnAPromiseOrAnObservable, as above
  @Locked('double:<0>')
  refuse(n: number): number {
    throw new RangeError(`cannot take ${n}`);
  }

  @Locked('feed:<0>')
  watch(id: string): Observable<string> {
    this.runs++;
    return handDriven(id);
  }

  @Locked('feed:<0>', { retry: { delay: 20, factor: 1, jitter: 0 } })
  watchWhenFree(id: string): Observable<string> {
    return handDriven(id);
  }

  @Locked('lease:<0>')
  async inspect(
    id: string,
    @CurrentLock() lock?: Lock,
    @FencingToken() token?: number,
    @LockSignal() signal?: AbortSignal,
  ) {
    return { id, lock, token, signal, seen: this.audit.seen() };
  }

  @Locked('report:<0>', {
    wait: false,
    onBusy: (error, args) => ({ skipped: args[0], code: error.code, retryAfter: error.retryAfter }),
  })
  async report(id: string) {
    this.runs++;
    return { ran: id };
  }

  @Locked('slot:<0>', { wait: false })
  async grabNow(id: string) {
    return id;
  }

  @Locked('slot:<0>')
  async grabWhenFree(id: string) {
    return id;
  }

  @Locked('slot:<0>', { wait: 50 })
  async grabWithin(id: string) {
    return id;
  }
}

/** Re-entrancy: the same resource across methods and classes, and a different one nested inside. */
@Injectable()
class AccountsService {
  @Locked('account:<0>', { wait: false })
  async touch(id: string, @CurrentLock() lock?: Lock) {
    return lock;
  }

  @Locked('account:<0>', { wait: false })
  async credit(id: string, @CurrentLock() lock?: Lock) {
    return { lock, held: LockContext.locks.flatMap((l) => l.resources), token: LockContext.token };
  }
}

@Injectable()
class LedgerService {
  constructor(private readonly accounts: AccountsService) {}

  // wait: false everywhere, so a re-entrant call that did deadlock fails at once instead of timing out.
  @Locked('account:<0>', { wait: false })
  async transfer(from: string, to: string, gate?: string, @CurrentLock() lock?: Lock) {
    const again = await this.check(from);
    const viaOtherClass = await this.accounts.touch(from);
    const credited = await this.accounts.credit(to);
    if (gate) await latches.enter(gate);
    return { lock, again, viaOtherClass, credited, afterNested: LockContext.lock };
  }

  @Locked('account:<0>', { wait: false })
  async check(id: string, @CurrentLock() lock?: Lock) {
    return { lock, token: LockContext.token };
  }
}

const ABOVE = 'test:above';
const BELOW = 'test:below';
/** A third-party style decorator that writes Reflect metadata on the method itself. */
const Tag =
  (key: string, value: unknown): MethodDecorator =>
  (_target, _key, descriptor) => {
    Reflect.defineMetadata(key, value, descriptor.value as object);
  };

@Injectable()
class TaggedService {
  @SetMetadata(ABOVE, 'set-above')
  @Tag(`${ABOVE}:reflect`, 'reflect-above')
  @Locked('tagged:<0>')
  @Tag(`${BELOW}:reflect`, 'reflect-below')
  @SetMetadata(BELOW, 'set-below')
  async tagged(id: string, amount: number, @FencingToken() token?: number) {
    return { id, amount, token };
  }
}

let cartInstances = 0;

@Injectable({ scope: Scope.REQUEST })
class CartSession {
  readonly instance = ++cartInstances;

  @Locked('cart:<0>', { wait: false })
  async checkout(id: string, gate: string | undefined, @FencingToken() token?: number) {
    if (gate) await latches.enter(gate);
    return { id, token, contextToken: LockContext.token, instance: this.instance };
  }
}

let calculatorInstances = 0;

@Injectable({ scope: Scope.TRANSIENT })
class PriceCalculator {
  readonly instance = ++calculatorInstances;

  @Locked('price:<0>')
  async quote(sku: string, gate?: string, @FencingToken() token?: number) {
    if (gate) await latches.enter(gate);
    return { sku, token, instance: this.instance };
  }
}

/** Two consumers of the transient provider: each gets its own instance. */
@Injectable()
class PricingDesk {
  constructor(readonly calculator: PriceCalculator) {}
}

@Injectable()
class SalesDesk {
  constructor(readonly calculator: PriceCalculator) {}
}

/** A second singleton of InventoryService, under another token. */
const SECOND_INVENTORY = 'SECOND_INVENTORY';

@Controller('items')
class ItemsController {
  constructor(private readonly inventory: InventoryService) {}

  /** The key comes from a query parameter that may be missing: the service refuses it. */
  @Post('reserve')
  reserve(@Query('id') id: string) {
    return this.inventory.reserve(id);
  }

  @Post('by-name/:name')
  @Locked('name:<0>')
  async byName(@Param('name') name: string) {
    return { name };
  }
}

@Controller('carts')
class CartsController {
  constructor(private readonly session: CartSession) {}

  @Post(':id/checkout')
  checkout(@Param('id') id: string, @Query('gate') gate?: string) {
    return this.session.checkout(id, gate);
  }
}

@Controller('prices')
class PricesController {
  constructor(private readonly calculator: PriceCalculator) {}

  @Post(':sku')
  quote(@Param('sku') sku: string, @Query('gate') gate?: string) {
    return this.calculator.quote(sku, gate);
  }
}

@Module({
  imports: [RedisLockModule.forRootAsync({ useFactory: () => lockOptions() })],
  controllers: [ItemsController, CartsController, PricesController],
  providers: [
    AuditService,
    InventoryService,
    AccountsService,
    LedgerService,
    TaggedService,
    CartSession,
    PriceCalculator,
    PricingDesk,
    SalesDesk,
    { provide: SECOND_INVENTORY, useClass: InventoryService },
  ],
})
class AppModule {}

describe('@Locked on provider methods', () => {
  let app: INestApplication;
  let base: string;
  let locks: LockService;
  let inventory: InventoryService;

  beforeAll(async () => {
    app = await NestFactory.create(AppModule, new ExpressAdapter(), { logger: false });
    await app.listen(0, '127.0.0.1');
    base = (await app.getUrl()).replace('[::1]', '127.0.0.1');
    locks = app.get(LockService);
    inventory = app.get(InventoryService);
  });
  afterAll(async () => {
    await app.close();
  });
  afterEach(() => latches.reset());

  const post = (path: string) => fetch(`${base}${path}`, { method: 'POST' });

  /** Takes and frees `resource`: proof that nobody holds it. */
  async function expectFree(resource: string): Promise<void> {
    await (await locks.tryAcquire(resource)).release();
  }

  async function expectBusy(resource: string): Promise<void> {
    await expect(locks.tryAcquire(resource)).rejects.toBeInstanceOf(LockBusyError);
  }

  describe('plain, sync, async and Observable methods', () => {
    it('locks a service method called directly (not through HTTP) and releases it when the method returns', async () => {
      const result = inventory.reserve('i1', 'reserve-i1');
      await latches.entered('reserve-i1');
      await expectBusy('item:i1');
      latches.open('reserve-i1');
      expect(await result).toMatchObject({ id: 'i1', token: expect.any(Number) });
      await expectFree('item:i1');
    });

    it('turns a sync method into one that returns a Promise of its result, computed under the lock', async () => {
      const acquired = nextLockEvent(locks, 'acquired', 'double:21');
      const released = nextLockEvent(locks, 'released', 'double:21');
      const result = inventory.double(21);
      expect(result).toBeInstanceOf(Promise);
      expect(await result).toBe(42);
      await Promise.all([acquired, released]);
    });

    it("rejects with a sync method's own error, untagged, and releases the lock", async () => {
      const released = nextLockEvent(locks, 'released', 'double:3');
      const error = await (inventory.refuse(3) as unknown as Promise<never>).catch(
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(RangeError);
      expect((error as Error).message).toBe('cannot take 3');
      expect(isLockFailure(error)).toBe(false);
      await released;
      await expectFree('double:3');
    });

    it('takes the lock of an Observable method only when subscribed, and holds it until the stream completes', async () => {
      const runs = inventory.runs;
      const watched = inventory.watch('f1');
      // Not subscribed yet: nothing ran, nothing is locked.
      expect(inventory.runs).toBe(runs);
      await expectFree('feed:f1');

      const values: string[] = [];
      const released = nextLockEvent(locks, 'released', 'feed:f1');
      let releasedFirst = false;
      void released.then(() => (releasedFirst = true));
      const completed = deferred<boolean>();
      watched.subscribe({
        next: (value) => values.push(value),
        complete: () => completed.resolve(releasedFirst),
      });
      const source = await subscriberOf('f1').promise;
      await expectBusy('feed:f1');
      source.next('first');
      expect(values).toEqual(['first']);
      await expectBusy('feed:f1');
      source.complete();
      // Completion reaches the subscriber after the release.
      expect(await completed.promise).toBe(true);
      expect(values).toEqual(['first']);
      await expectFree('feed:f1');
    });

    it('releases the lock of an Observable method when the subscriber unsubscribes, and tears the source down', async () => {
      const subscription = inventory.watch('f2').subscribe();
      await subscriberOf('f2').promise;
      await expectBusy('feed:f2');
      const released = nextLockEvent(locks, 'released', 'feed:f2');
      subscription.unsubscribe();
      expect(tornDown.has('f2')).toBe(true);
      await released;
      await expectFree('feed:f2');
    });

    it('ends the stream of an Observable method with LockLostError once its lock is lost, and tears the source down', async () => {
      const values: string[] = [];
      const ended = deferred<unknown>();
      inventory.watch('f5').subscribe({
        next: (value) => values.push(value),
        error: (error: unknown) => ended.resolve(error),
        complete: () => ended.resolve('completed'),
      });
      const source = await subscriberOf('f5').promise;
      source.next('before');
      const lost = nextLockEvent(locks, 'lost', 'feed:f5');
      // Released from outside (the CLI's release does this): the next extension finds it gone.
      await locks.forceRelease('feed:f5');
      await lost;
      expect(await ended.promise).toBeInstanceOf(LockLostError);
      expect(tornDown.has('f5')).toBe(true);
      source.next('after');
      expect(values).toEqual(['before']);
    });

    it('releases the lock of an Observable method whose stream errors, before the error reaches the subscriber', async () => {
      const released = nextLockEvent(locks, 'released', 'feed:f3');
      let releasedFirst = false;
      void released.then(() => (releasedFirst = true));
      const failed = deferred<{ error: unknown; releasedFirst: boolean }>();
      inventory.watch('f3').subscribe({
        error: (error: unknown) => failed.resolve({ error, releasedFirst }),
      });
      const source = await subscriberOf('f3').promise;
      source.error(new RangeError('feed broke'));
      const outcome = await failed.promise;
      expect(outcome.error).toBeInstanceOf(RangeError);
      expect(isLockFailure(outcome.error)).toBe(false);
      expect(outcome.releasedFirst).toBe(true);
      await expectFree('feed:f3');
    });

    it('stops waiting for the lock when the subscriber of an Observable method unsubscribes before it is granted', async () => {
      const holder = await locks.acquire('feed:w1');
      const firstTry = nextLockEvent(locks, 'contended', 'feed:w1');
      const subscription = inventory.watchWhenFree('w1').subscribe();
      await firstTry;
      subscription.unsubscribe();
      const laterTries = countLockEvents(locks, 'contended', 'feed:w1');
      // Another engine polls the key at the method's pace (every 20 ms): while it retries
      // ten times, a waiter that kept going would have retried as well.
      const probe = new LockEngine(lockOptions());
      await probe.connect();
      const probed = nextLockEvent(probe, 'contended', 'feed:w1', 10);
      const probeLock = probe.acquire('feed:w1', { retry: { delay: 20, factor: 1, jitter: 0 } });
      try {
        await probed;
        expect(laterTries.count).toBe(0);
      } finally {
        laterTries.stop();
        await holder.release();
        await probeLock.then((lock) => lock.release());
        await probe.close();
      }
      expect(subscribers.has('w1')).toBe(false);
    });
  });

  describe('request-scoped and transient providers', () => {
    it('locks the method of a request-scoped provider called while handling an HTTP request', async () => {
      const first = post('/carts/c1/checkout?gate=cart-c1');
      await latches.entered('cart-c1');
      await expectBusy('cart:c1');
      // The provider's busy error reaches the client as a 409, like a locked handler's.
      const second = await post('/carts/c1/checkout');
      expect(second.status).toBe(409);
      expect(second.headers.get('retry-after')).not.toBeNull();
      expect(((await second.json()) as { code: string }).code).toBe('LOCK_BUSY');
      latches.open('cart-c1');
      const done = await first;
      expect(done.status).toBe(201);
      const body = (await done.json()) as { token: number; contextToken: number; instance: number };
      expect(body.token).toEqual(expect.any(Number));
      expect(body.contextToken).toBe(body.token);
      await expectFree('cart:c1');
      const next = (await (await post('/carts/c1/checkout')).json()) as typeof body;
      // A new request, a new instance of the provider, a newer token.
      expect(next.instance).not.toBe(body.instance);
      expect(next.token).toBeGreaterThan(body.token);
    });

    it('locks the method of a transient provider on every instance Nest makes of it', async () => {
      const left = app.get(PricingDesk).calculator;
      const right = app.get(SalesDesk).calculator;
      expect(left).not.toBe(right);
      const first = left.quote('p1', 'price-p1');
      await latches.entered('price-p1');
      await expectBusy('price:p1');
      latches.open('price-p1');
      const second = await right.quote('p1');
      expect((await first).token).toEqual(expect.any(Number));
      expect(second.token).toBeGreaterThan((await first).token!);
      expect(second.instance).not.toBe((await first).instance);

      const resolved = await app.resolve(PriceCalculator);
      expect((await resolved.quote('p2')).token).toEqual(expect.any(Number));

      const viaHttp = await post('/prices/p3');
      expect(viaHttp.status).toBe(201);
      expect(((await viaHttp.json()) as { token: number }).token).toEqual(expect.any(Number));
      await expectFree('price:p1');
    });
  });

  it('locks the methods of every singleton of a class, when one class backs two providers', async () => {
    const second = app.get<InventoryService>(SECOND_INVENTORY);
    expect(second).not.toBe(inventory);
    const held = second.reserve('i2', 'reserve-i2');
    await latches.entered('reserve-i2');
    await expectBusy('item:i2');
    latches.open('reserve-i2');
    expect((await held).token).toEqual(expect.any(Number));
  });

  describe('re-entrancy', () => {
    it('lets a locked method call locked methods on the same resource in its call chain, with the same lock and token', async () => {
      const ledger = app.get(LedgerService);
      const granted = countLockEvents(locks, 'acquired', 'account:alice');
      const result = await ledger.transfer('alice', 'bob');
      granted.stop();
      expect(granted.count).toBe(1);
      expect(result.again.lock).toBe(result.lock);
      expect(result.again.token).toBe(result.lock!.token);
      expect(result.viaOtherClass).toBe(result.lock);
      await expectFree('account:alice');
    });

    it('gives a nested call on a different resource its own lock, released when that call returns', async () => {
      const ledger = app.get(LedgerService);
      const result = await ledger.transfer('carol', 'dave');
      expect(result.credited.lock).not.toBe(result.lock);
      expect(result.credited.lock!.resources).toEqual(['account:dave']);
      expect(result.credited.token).toBe(result.credited.lock!.token);
      expect(result.credited.held).toEqual(['account:carol', 'account:dave']);
      expect(result.credited.lock!.isReleased).toBe(true);
      // Back in the outer method, its own lock is the current one again.
      expect(result.afterNested).toBe(result.lock);
      await expectFree('account:carol');
      await expectFree('account:dave');
    });

    it('still excludes a call from another call chain while the outer lock is held', async () => {
      const ledger = app.get(LedgerService);
      const accounts = app.get(AccountsService);
      const transfer = ledger.transfer('erin', 'frank', 'transfer-erin');
      await latches.entered('transfer-erin');
      await expect(accounts.touch('erin')).rejects.toBeInstanceOf(LockBusyError);
      latches.open('transfer-erin');
      await transfer;
      await expect(accounts.touch('erin')).resolves.toBeInstanceOf(Lock);
    });
  });

  describe('fail closed', () => {
    it('rejects a call on an instance made with `new` with LockSetupError, without running the body', async () => {
      const rogue = new InventoryService(new AuditService(new LockContext()));
      const error = await rogue.reserve('n1').catch((e: unknown) => e);
      expect(error).toBeInstanceOf(LockSetupError);
      expect((error as LockSetupError).code).toBe('LOCK_NOT_SET_UP');
      expect((error as Error).message).toContain('InventoryService.reserve is @Locked()');
      await expect(rogue.double(1) as unknown as Promise<number>).rejects.toBeInstanceOf(
        LockSetupError,
      );
      const streamed = deferred<unknown>();
      rogue.watch('n1').subscribe({ error: (e: unknown) => streamed.resolve(e) });
      expect(await streamed.promise).toBeInstanceOf(LockSetupError);
      expect(rogue.runs).toBe(0);
      await expectFree('item:n1');
    });
  });

  describe('key errors', () => {
    it('rejects a key value that cannot make a key with LockKeyError for a service caller, without running the body', async () => {
      const runs = inventory.runs;
      for (const bad of [undefined, null, { id: 1 }, '', 'x'.repeat(201)]) {
        const error = await inventory.reserve(bad as never).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(LockKeyError);
        expect((error as Error).message).toContain(
          "@Locked('item:<0>') on InventoryService.reserve",
        );
      }
      expect(inventory.runs).toBe(runs);
    });

    it('answers a key value that cannot make a key with 400, from a service or a locked handler', async () => {
      const missing = await post('/items/reserve');
      expect(missing.status).toBe(400);
      const body = (await missing.json()) as { code: string; message: string };
      expect(body.code).toBe('LOCK_INVALID_KEY');
      expect(body.message).toContain('<0> is undefined');

      const tooLong = await post(`/items/by-name/${'n'.repeat(201)}`);
      expect(tooLong.status).toBe(400);
      // The client is told what is wrong with its value, not the class, method or template.
      const tooLongMessage = ((await tooLong.json()) as { message: string }).message;
      expect(tooLongMessage).toBe('The request cannot be locked: <0> is 201 characters long.');
      // Within the value limit, but too long once encoded: still the client's 400, not a 500.
      const encodedTooLong = await post(`/items/by-name/${'%2F'.repeat(200)}`);
      expect(encodedTooLong.status).toBe(400);
    });
  });

  describe('lock parameters and LockContext', () => {
    it('fills @CurrentLock(), @FencingToken() and @LockSignal() with the held lock, over anything the caller passed', async () => {
      const result = await inventory.inspect('l1', undefined, 999_999_999, undefined);
      expect(result.lock).toBeInstanceOf(Lock);
      expect(result.lock!.resources).toEqual(['lease:l1']);
      expect(result.token).toBe(result.lock!.token);
      expect(result.token).not.toBe(999_999_999);
      expect(result.signal).toBe(result.lock!.signal);
      expect(result.signal!.aborted).toBe(false);
      // Released on return: the lock is no longer held, and its signal was not aborted by that.
      expect(result.lock!.isReleased).toBe(true);
      expect(result.signal!.aborted).toBe(false);
    });

    it('shows the lock to a service that the locked method calls, through injected and static LockContext', async () => {
      const { lock, seen } = await inventory.inspect('l2');
      expect(seen.lock).toBe(lock);
      expect(seen.injected).toBe(lock!.token);
      expect(seen.static).toBe(lock!.token);
      expect(seen.resources).toEqual(['lease:l2']);
      // Outside any locked call there is nothing to see.
      expect(app.get(LockContext).token).toBeUndefined();
      expect(LockContext.lock).toBeUndefined();
      expect(LockContext.locks).toEqual([]);
    });
  });

  describe('options', () => {
    it("returns the onBusy option's result as the method's result when the lock is busy, without running the body", async () => {
      const holder = await locks.acquire('report:r1');
      const runs = inventory.runs;
      const result = await inventory.report('r1');
      expect(result).toEqual({ skipped: 'r1', code: 'LOCK_BUSY', retryAfter: expect.any(Number) });
      expect(inventory.runs).toBe(runs);
      await holder.release();
      expect(await inventory.report('r1')).toEqual({ ran: 'r1' });
    });

    it('fails at the first attempt with LockBusyError under wait: false', async () => {
      const holder = await locks.acquire('slot:s1');
      const failed = nextLockEvent(locks, 'failed', 'slot:s1');
      const error = await inventory.grabNow('s1').catch((e: unknown) => e);
      expect(error).toBeInstanceOf(LockBusyError);
      expect(error).not.toBeInstanceOf(LockTimeoutError);
      expect((error as LockBusyError).retryAfter).toBeGreaterThan(0);
      expect((await failed).attempts).toBe(1);
      await holder.release();
    });

    it('waits for a busy lock by default and runs once the holder releases it', async () => {
      const holder = await locks.acquire('slot:s2');
      const contended = nextLockEvent(locks, 'contended', 'slot:s2');
      const acquired = nextLockEvent(locks, 'acquired', 'slot:s2');
      const result = inventory.grabWhenFree('s2');
      await contended;
      await holder.release();
      expect(await result).toBe('s2');
      expect((await acquired).attempts).toBeGreaterThan(1);
    });

    it('gives up with LockTimeoutError once a numeric wait runs out', async () => {
      const holder = await locks.acquire('slot:s3');
      const error = await inventory.grabWithin('s3').catch((e: unknown) => e);
      expect(error).toBeInstanceOf(LockTimeoutError);
      expect((error as LockTimeoutError).waited).toBeGreaterThanOrEqual(50);
      await holder.release();
    });
  });

  describe('metadata', () => {
    it('keeps SetMetadata and Reflect metadata written by decorators above and below @Locked', async () => {
      const tagged = app.get(TaggedService);
      const reflector = app.get(Reflector);
      expect(reflector.get(ABOVE, tagged.tagged)).toBe('set-above');
      expect(reflector.get(BELOW, tagged.tagged)).toBe('set-below');
      expect(Reflect.getMetadata(`${ABOVE}:reflect`, tagged.tagged)).toBe('reflect-above');
      expect(Reflect.getMetadata(`${BELOW}:reflect`, tagged.tagged)).toBe('reflect-below');
      // ... and it is still the locked method.
      expect(await tagged.tagged('t1', 5)).toMatchObject({ id: 't1', token: expect.any(Number) });
    });

    it("keeps the method's name and length", () => {
      const tagged = app.get(TaggedService);
      expect(tagged.tagged.name).toBe('tagged');
      expect(tagged.tagged.length).toBe(3);
      expect(inventory.reserve.name).toBe('reserve');
      expect(inventory.reserve.length).toBe(3);
      expect(inventory.double.name).toBe('double');
      expect(inventory.double.length).toBe(1);
    });
  });
});

describe('@Locked in an application without RedisLockModule', () => {
  @Injectable()
  class UnwiredService {
    runs = 0;

    @Locked('unwired:<0>')
    async run(id: string) {
      this.runs++;
      return id;
    }
  }

  @Module({ providers: [UnwiredService] })
  class UnwiredModule {}

  it('rejects the call with LockSetupError that says to import the module, without running the body', async () => {
    const app = await NestFactory.createApplicationContext(UnwiredModule, { logger: false });
    try {
      const service = app.get(UnwiredService);
      const error = await service.run('u1').catch((e: unknown) => e);
      expect(error).toBeInstanceOf(LockSetupError);
      expect((error as Error).message).toContain('UnwiredService.run is @Locked()');
      expect((error as Error).message).toContain('Import RedisLockModule.forRoot()');
      // The same error in a test that compiled its module but did not init() it.
      expect((error as Error).message).toContain(
        'In a test, call init() on the compiled testing module',
      );
      expect(service.runs).toBe(0);
    } finally {
      await app.close();
    }
  });
});

describe('a lock parameter on a method without @Locked()', () => {
  @Injectable()
  class Forgetful {
    // The fencing token was asked for, the lock forgotten: the method would run unlocked.
    async charge(id: string, @FencingToken() token?: number) {
      return `${id}:${token}`;
    }
  }

  class Delegating extends Forgetful {}

  @Injectable()
  class Overriding {
    @Locked('charge:<0>')
    async charge(id: string, @FencingToken() token?: number) {
      return `${id}:${token}`;
    }
  }

  // An override that leaves the locking to super's locked method is fine.
  @Injectable()
  class Subclass extends Overriding {
    override async charge(id: string) {
      return super.charge(id);
    }
  }

  async function start(providers: Provider[]): Promise<unknown> {
    @Module({
      imports: [RedisLockModule.forRootAsync({ useFactory: () => lockOptions() })],
      providers,
    })
    class ChargeModule {}
    const app = await NestFactory.createApplicationContext(ChargeModule, { logger: false }).catch(
      (e: unknown) => e,
    );
    if (app instanceof Error) return app;
    await (app as INestApplicationContext).close();
    return undefined;
  }

  it('stops the application at start-up with a LockOptionsError that names the method and says what to add', async () => {
    const error = await start([Forgetful]);
    expect(error).toBeInstanceOf(LockOptionsError);
    expect((error as Error).message).toBe(
      "Forgetful.charge() has @FencingToken() on its parameter 1, which is filled from the method's lock, " +
        "but the method has no @Locked() (or @Limited()), so it would run unlocked. Add @Locked('<key>') to the method, " +
        'or drop @FencingToken().',
    );
    // Inherited as is, it is the same mistake.
    expect(((await start([Delegating])) as Error).message).toContain('Delegating.charge()');
  });

  it('accepts an override that calls the locked method of its parent', async () => {
    expect(await start([Subclass])).toBeUndefined();
  });
});

describe('@Locked in two applications of one process', () => {
  @Injectable({ scope: Scope.REQUEST })
  class ScopedWorker {
    @Locked('worker:<0>')
    async work(id: string, @FencingToken() token?: number) {
      return token;
    }
  }

  async function start(): Promise<INestApplicationContext> {
    @Module({
      imports: [RedisLockModule.forRootAsync({ useFactory: () => lockOptions() })],
      providers: [ScopedWorker],
    })
    class WorkerModule {}
    return NestFactory.createApplicationContext(WorkerModule, { logger: false });
  }

  it('keeps the request-scoped providers of one application locked after the other closes', async () => {
    const first = await start();
    try {
      const second = await start();
      await second.close();
      const worker = await first.resolve(ScopedWorker, ContextIdFactory.create());
      await expect(worker.work('w1')).resolves.toEqual(expect.any(Number));
    } finally {
      await first.close();
    }
    // With neither application left, nothing sets the class up: it fails closed again.
    await expect(new ScopedWorker().work('w1')).rejects.toBeInstanceOf(LockSetupError);
  });
});

describe('@Locked with RedisLockModule registered more than once in one application', () => {
  /** A service whose locked method reports which of the first two nodes hold its lock's key. */
  function reporter(name: string) {
    @Injectable()
    class Reporter {
      @Locked('report:<0>', { wait: false })
      async nodesHolding(id: string): Promise<number[]> {
        return Promise.all(clients.map((c) => c.exists(`lock:{report:${id}}`)));
      }
    }
    Object.defineProperty(Reporter, 'name', { value: name });
    return Reporter;
  }
  const onNode = (i: number) =>
    RedisLockModule.forRoot({ nodes: [redis.nodes[i].url], logger: quietLogger() });
  let clients: Redis[];
  let app: INestApplicationContext | undefined;

  beforeAll(() => {
    clients = redis.nodes.slice(0, 2).map((n) => new Redis(n.url));
  });
  afterEach(async () => {
    await app?.close();
    app = undefined;
  });
  afterAll(() => Promise.all(clients.map((c) => c.quit())));

  it('locks each class with the registration its own module imports, directly or re-exported, and else the global one', async () => {
    const [A, B, C, Root] = ['A', 'B', 'C', 'Root'].map(reporter);
    const registrationA = onNode(0);
    @Module({ imports: [registrationA], providers: [A] })
    class FeatureA {}
    @Module({ imports: [onNode(1)], exports: [RedisLockModule] })
    class SharedB {}
    @Module({ imports: [SharedB], providers: [B] })
    class FeatureB {}
    @Module({ imports: [SharedB], providers: [C] })
    class FeatureC {}
    @Module({
      imports: [{ ...onNode(0), global: true }, FeatureA, FeatureB, FeatureC],
      providers: [Root],
    })
    class AppModule {}
    app = await NestFactory.createApplicationContext(AppModule, { logger: false });
    await expect(app.get(A).nodesHolding('1')).resolves.toEqual([1, 0]);
    await expect(app.get(B).nodesHolding('2')).resolves.toEqual([0, 1]);
    await expect(app.get(C).nodesHolding('3')).resolves.toEqual([0, 1]);
    await expect(app.get(Root).nodesHolding('4')).resolves.toEqual([1, 0]);
  });

  it.each([
    ['imports both', 'several'],
    ['imports neither', 'none'],
  ])(
    'stops the start when a class with @Locked() methods %s, naming it and saying what to import',
    async (_case, seen) => {
      const Torn = reporter('Torn');
      const [first, second] = [onNode(0), onNode(1)];
      @Module({ imports: [first] })
      class UsesFirst {}
      @Module({ imports: [second] })
      class UsesSecond {}
      @Module({ imports: seen === 'several' ? [first, second] : [], providers: [Torn] })
      class TornModule {}
      @Module({ imports: [UsesFirst, UsesSecond, TornModule] })
      class AppModule {}
      const started = NestFactory.createApplicationContext(AppModule, {
        logger: false,
        abortOnError: false,
      });
      const error = (await started.then(
        (context) => context.close(),
        (e: unknown) => e,
      )) as Error;
      expect(error).toBeInstanceOf(LockOptionsError);
      expect(error.message).toMatch(
        new RegExp(
          `^RedisLockModule is registered 2 times in this application \\(nodes 127\\.0\\.0\\.1:\\d+; nodes 127\\.0\\.0\\.1:\\d+\\), and Torn \\(in TornModule\\) has @Locked\\(\\) methods but its module can inject ${seen} of them`,
        ),
      );
      expect(error.message).toContain('Import exactly one registration into that module');
    },
  );
});

describe('@Locked templates checked when the class is defined', () => {
  it.each([
    [
      'an index beyond the parameters',
      'order:<3>',
      /refers to argument 3, but the method declares 1 parameter/,
    ],
    ['a placeholder that is not an index', 'order:<x>', /'<x>' is not a placeholder/],
    ['an unbalanced <', 'order:<0', /unbalanced '<' or '>'/],
  ])('throws LockKeyError for %s, naming the class and method', (_, template, message) => {
    let error: unknown;
    try {
      class PaymentsService {
        @Locked(template)
        async pay(id: number) {
          return id;
        }
      }
      void PaymentsService;
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(LockKeyError);
    expect((error as Error).message).toMatch(message);
    expect((error as Error).message).toContain('on PaymentsService.pay');
  });

  it('throws when a lock parameter is part of the key, naming the class and method', () => {
    expect(() => {
      class PaymentsService {
        @Locked('order:<1>')
        async pay(id: number, @FencingToken() token?: number) {
          return [id, token];
        }
      }
      void PaymentsService;
    }).toThrow(
      '@Locked() on PaymentsService.pay: <1> is a lock parameter, filled in after locking; it cannot be part of the key.',
    );
  });

  it('throws for a return type that the metadata gives as Function (a type-only import), saying to import it as a value', () => {
    expect(() => {
      class FeedService {
        @Locked('feed:<0>')
        // What tsc writes for `stream(id: string): Observable<string>` with `import { type Observable }`.
        @Reflect.metadata('design:returntype', Function)
        stream(id: string): Observable<string> {
          return handDriven(id);
        }
      }
      void FeedService;
    }).toThrow(
      /^@Locked\(\) on FeedService\.stream: its return type reads as Function in the decorator metadata, .*import the return type as a value \(`import \{ Observable \} from 'rxjs'`\)\.$/,
    );
  });
});

describe('RedisLockModule locked defaults', () => {
  @Injectable()
  class DefaultsService {
    @Locked('defaults:<0>')
    async plain(id: string, @CurrentLock() lock?: Lock) {
      return lock!.ttl;
    }

    @Locked('defaults:<0>', { wait: true, ttl: 3000 })
    async patient(id: string, @CurrentLock() lock?: Lock) {
      return lock!.ttl;
    }
  }

  @Module({
    imports: [
      RedisLockModule.forRootAsync({
        useFactory: () => lockOptions({ locked: { wait: false, ttl: 1500 } }),
      }),
    ],
    providers: [DefaultsService],
  })
  class DefaultsModule {}

  let app: INestApplicationContext;
  let locks: LockService;
  let service: DefaultsService;
  beforeAll(async () => {
    app = await NestFactory.createApplicationContext(DefaultsModule, { logger: false });
    locks = app.get(LockService);
    service = app.get(DefaultsService);
  });
  afterAll(async () => {
    await app.close();
  });

  it('applies the module defaults (here wait: false and ttl: 1500) to a @Locked method without options', async () => {
    expect(await service.plain('d1')).toBe(1500);
    const holder = await locks.acquire('defaults:d1');
    const failed = nextLockEvent(locks, 'failed', 'defaults:d1');
    await expect(service.plain('d1')).rejects.toBeInstanceOf(LockBusyError);
    expect((await failed).attempts).toBe(1);
    await holder.release();
  });

  it("lets a decorator's own options override the module defaults", async () => {
    const holder = await locks.acquire('defaults:d2');
    const contended = nextLockEvent(locks, 'contended', 'defaults:d2');
    const result = service.patient('d2');
    await contended;
    await holder.release();
    expect(await result).toBe(3000);
  });
});

describe('contextInterceptor: false', () => {
  /** What a user might write instead of the interceptor: it sees the typed error. */
  @Catch(LockBusyError)
  class LockedFilter implements ExceptionFilter {
    catch(error: LockBusyError, host: ArgumentsHost) {
      host
        .switchToHttp()
        .getResponse<{ status(code: number): { json(body: unknown): void } }>()
        .status(423)
        .json({ caught: error.name, code: error.code });
    }
  }

  @Injectable()
  class JobsService {
    @Locked('job:<0>', { wait: false })
    async run(id: string) {
      return { id };
    }
  }

  @Controller('jobs')
  class JobsController {
    constructor(private readonly jobs: JobsService) {}

    @Post(':id')
    run(@Param('id') id: string) {
      return this.jobs.run(id);
    }

    @Post(':id/filtered')
    @UseFilters(LockedFilter)
    filtered(@Param('id') id: string) {
      return this.jobs.run(id);
    }

    @Post(':id/intercepted')
    @UseInterceptors(LockContextInterceptor)
    intercepted(@Param('id') id: string) {
      return this.jobs.run(id);
    }
  }

  @Module({
    imports: [
      RedisLockModule.forRootAsync({
        useFactory: () => lockOptions({ contextInterceptor: false }),
      }),
    ],
    controllers: [JobsController],
    providers: [JobsService],
  })
  class JobsModule {}

  let app: INestApplication;
  let base: string;
  let locks: LockService;
  let holder: Lock;
  beforeAll(async () => {
    app = await NestFactory.create(JobsModule, new ExpressAdapter(), { logger: false });
    await app.listen(0, '127.0.0.1');
    base = (await app.getUrl()).replace('[::1]', '127.0.0.1');
    locks = app.get(LockService);
    holder = await locks.acquire('job:j1');
  });
  afterAll(async () => {
    await holder.release();
    await app.close();
  });

  const post = (path: string) => fetch(`${base}${path}`, { method: 'POST' });

  it('leaves a busy lock as LockBusyError for a service caller', async () => {
    await expect(app.get(JobsService).run('j1')).rejects.toBeInstanceOf(LockBusyError);
  });

  it("leaves a busy lock to Nest's default handling over HTTP: a 500", async () => {
    const response = await post('/jobs/j1');
    expect(response.status).toBe(500);
    expect(response.headers.get('retry-after')).toBeNull();
    expect((await post('/jobs/j2')).status).toBe(201);
  });

  it("hands the typed LockBusyError to the application's own exception filter", async () => {
    const response = await post('/jobs/j1/filtered');
    expect(response.status).toBe(423);
    expect(await response.json()).toEqual({ caught: 'LockBusyError', code: 'LOCK_BUSY' });
  });

  it('answers 409 with Retry-After where LockContextInterceptor is applied by hand', async () => {
    const response = await post('/jobs/j1/intercepted');
    expect(response.status).toBe(409);
    expect(Number(response.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(((await response.json()) as { code: string }).code).toBe('LOCK_BUSY');
  });
});
