/**
 * Bad input to `@Locked()`, found by property: decorator options and key
 * templates at decoration time (compile, or LockKeyError / LockOptionsError
 * naming what to change), and argument values at call time through a real
 * Nest application on a real redis-server: each call either runs its body
 * under the lock its key names, or fails with a LockKeyError and the body
 * never runs. A key never reads `order:undefined`.
 *
 * The encoding of key values (injective, reversible) is specified in
 * test/nest/lock-key.spec.ts; this file is about what reaches the method.
 */
import 'reflect-metadata';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import fc from 'fast-check';
import { Redis } from 'ioredis';
import { from, lastValueFrom, Observable } from 'rxjs';
import {
  isLockFailure,
  LockContext,
  Locked,
  LockKeyError,
  LockOptionsError,
  MAX_RESOURCE_LENGTH,
  RedisLockModule,
  type LockedOptions,
  type LockKey,
} from '../../lib/index.js';
import { compileLockKey, MAX_KEY_VALUE_LENGTH } from '../../lib/nest/locked/lock-key.js';
import { quietLogger } from '../support/quiet-logger.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';
import { anyValue, badMs, badRetry, notABoolean, notANumber, validRetry } from './arbitraries.js';
import { failOnUnhandledRejections } from './unhandled-rejections.js';

const redis = useRedisNodes(1);
failOnUnhandledRejections();

/** What applying `@Locked(key, options)` to a method with `parameters` parameters threw, if anything. */
function decorate(key: unknown, options?: unknown, parameters?: number): unknown {
  class Target {
    method(..._args: unknown[]): unknown {
      return undefined;
    }
  }
  const descriptor = Object.getOwnPropertyDescriptor(Target.prototype, 'method')!;
  if (parameters !== undefined) {
    Reflect.defineMetadata(
      'design:paramtypes',
      Array.from({ length: parameters }, () => Object),
      Target.prototype,
      'method',
    );
  }
  try {
    Locked(key as LockKey, options as LockedOptions)(Target.prototype, 'method', descriptor);
    return undefined;
  } catch (error) {
    return error;
  }
}

// --- Decoration time ----------------------------------------------------------------------------

/** Template text built from the characters that matter to the parser, and some that do not. */
const template = fc.string({
  unit: fc.constantFrom(
    '<',
    '>',
    '0',
    '1',
    '7',
    '.',
    'a',
    'Z',
    '_',
    '$',
    '-',
    ':',
    '{',
    '}',
    ' ',
    '%',
    'é',
  ),
  maxLength: 24,
});

describe('@Locked() at decoration time (property-based)', () => {
  it('compiles any template string or refuses it with a LockKeyError, never another error', () => {
    fc.assert(
      fc.property(
        fc.oneof(template, fc.array(template, { maxLength: 3 })),
        fc.option(fc.nat(4), { nil: undefined }),
        (key, parameters) => {
          const error = decorate(key, undefined, parameters);
          if (error === undefined) {
            // A template that compiles refers only to declared parameters.
            const { maxIndex } = compileLockKey(key, 'Target.method', parameters);
            if (parameters !== undefined) expect(maxIndex).toBeLessThan(parameters);
          } else {
            expect(error).toBeInstanceOf(LockKeyError);
            expect((error as Error).message).toContain('Target.method');
          }
        },
      ),
      { numRuns: 3000 },
    );
  });

  it('refuses a key of any other kind with a LockKeyError naming the method', () => {
    fc.assert(
      fc.property(
        anyValue.filter(
          (v) => typeof v !== 'string' && typeof v !== 'function' && !Array.isArray(v),
        ),
        (key) => {
          const error = decorate(key);
          expect(error).toBeInstanceOf(LockKeyError);
          expect((error as Error).message).toContain('@Locked() on Target.method needs a key');
        },
      ),
      { numRuns: 300 },
    );
  });

  it('turns every template that compiles into resource names or a LockKeyError, whatever the arguments', () => {
    fc.assert(
      fc.property(template, fc.array(anyValue, { maxLength: 3 }), (text, args) => {
        let key;
        try {
          key = compileLockKey(text, 'Target.method', undefined);
        } catch {
          return;
        }
        try {
          const resources = key.resolve(args);
          for (const resource of resources) {
            expect(typeof resource).toBe('string');
            expect(resource.length).toBeGreaterThan(0);
            expect(resource.length).toBeLessThanOrEqual(MAX_RESOURCE_LENGTH);
          }
        } catch (error) {
          expect(error).toBeInstanceOf(LockKeyError);
        }
      }),
      { numRuns: 3000 },
    );
  });

  interface Field {
    readonly value: unknown;
    readonly wrong: string | undefined;
  }
  const fine = (value: unknown): Field => ({ value, wrong: undefined });
  const wrong =
    (name: string) =>
    (value: unknown): Field => ({ value, wrong: name });
  const lockedOptions = fc
    .record(
      {
        ttl: fc.oneof(
          fc.integer({ min: 10, max: 2 ** 31 - 1 }).map(fine),
          badMs(10).map(wrong('ttl')),
        ),
        wait: fc.oneof(
          fc.boolean().map(fine),
          fc.integer({ min: 0, max: 60_000 }).map(fine),
          badMs(0)
            .filter((v) => typeof v !== 'boolean')
            .map(wrong('wait')),
        ),
        retry: fc.oneof(
          validRetry().map(fine),
          badRetry('retry').map(([name, value]) => wrong(name)(value)),
        ),
        autoExtend: fc.oneof(fc.boolean().map(fine), notABoolean.map(wrong('autoExtend'))),
        onBusy: fc.oneof(
          fc.constant(() => 'busy').map(fine),
          fc
            .oneof(
              notANumber.filter((v) => typeof v !== 'function'),
              fc.integer(),
            )
            .map(wrong('onBusy')),
        ),
      },
      { requiredKeys: [] },
    )
    .chain((fields) =>
      fc
        .option(
          fc
            .constantFrom('tll', 'timeout', 'waitTimeout', 'key', 'signal', 'retries')
            .map((name) => ({ name, value: 1 })),
          { nil: undefined, freq: 4 },
        )
        .map((unknown) => {
          const options: Record<string, unknown> = {};
          const wrongNames: string[] = [];
          for (const [name, field] of Object.entries(fields)) {
            if (!field) continue;
            options[name] = field.value;
            if (field.wrong) wrongNames.push(field.wrong);
          }
          if (unknown) {
            options[unknown.name] = unknown.value;
            wrongNames.push(`'${unknown.name}'`);
          }
          return { options, wrongNames };
        }),
    );

  it('refuses any wrong option with a LockOptionsError naming the method and the option, and accepts valid ones', () => {
    fc.assert(
      fc.property(lockedOptions, ({ options, wrongNames }) => {
        const error = decorate('order:<0>', options, 1);
        if (wrongNames.length === 0) {
          expect(error).toBeUndefined();
          return;
        }
        expect(error).toBeInstanceOf(LockOptionsError);
        const { message } = error as Error;
        expect(message).toContain('@Locked() on Target.method');
        expect(wrongNames.some((name) => message.includes(name))).toBe(true);
      }),
      { numRuns: 2000 },
    );
  });

  it('says what wait takes when it is neither a boolean nor a number of ms', () => {
    const error = decorate('order:<0>', { wait: 'yes' }, 1);
    expect(error).toBeInstanceOf(LockOptionsError);
    expect((error as Error).message).toMatch(
      /@Locked\(\) on Target\.method: wait \(true, false or a number of ms\) must be a whole number of milliseconds .*\(got 'yes'\)/,
    );
  });

  it('refuses options that are not an object with a LockOptionsError', () => {
    fc.assert(
      fc.property(
        anyValue.filter(
          (v) => v !== undefined && (typeof v !== 'object' || v === null || Array.isArray(v)),
        ),
        (options) => {
          const error = decorate('order:<0>', options, 1);
          expect(error).toBeInstanceOf(LockOptionsError);
          expect((error as Error).message).toContain('@Locked() on Target.method');
        },
      ),
      { numRuns: 200 },
    );
  });
});

// --- Call time, through a Nest application -------------------------------------------------------

let view: Redis;

interface Run {
  readonly resources: readonly string[];
  /** Every resource's key on the node held this lock's value while the body ran. */
  readonly held: boolean;
}

@Injectable()
class Orders {
  readonly runs: Run[] = [];

  private async record(): Promise<void> {
    const lock = LockContext.lock;
    const values = lock
      ? await Promise.all(lock.resources.map((r) => view.get(`lock:{${r}}`)))
      : [];
    this.runs.push({
      resources: lock?.resources ?? [],
      held: lock !== undefined && lock.isHeld && values.every((v) => v === lock.value),
    });
  }

  @Locked('order:<0>', { wait: false })
  async pay(_id: unknown) {
    await this.record();
    return 'paid';
  }

  @Locked('customer:<0.customer.id>:cart:<1>', { wait: false })
  async checkout(_order: unknown, _cart: unknown) {
    await this.record();
    return 'checked out';
  }

  @Locked(['stock:<0.sku>', 'order:<1>'], { wait: false })
  async reserve(_item: unknown, _order: unknown) {
    await this.record();
    return 'reserved';
  }

  @Locked('order:<0>', { wait: false })
  watch(_id: unknown): Observable<string> {
    // The body of a stream method runs once the lock is granted, on subscription; the lock
    // lasts until the stream completes.
    return from(this.record().then(() => 'watched'));
  }

  @Locked((key: unknown) => key as string, { wait: false })
  async byFunction(_key: unknown) {
    await this.record();
    return 'done';
  }
}

@Module({
  imports: [
    RedisLockModule.forRootAsync({
      useFactory: () => ({ nodes: [redis.nodes[0].url], logger: quietLogger() }),
    }),
  ],
  providers: [Orders],
})
class AppModule {}

/** A value as the template encoder takes it, or undefined when it cannot be part of a key. */
function keyText(value: unknown): string | undefined {
  if (typeof value === 'string')
    return value.length > 0 && !/\p{Cs}/u.test(value) ? value : undefined;
  if (typeof value === 'number') return Number.isFinite(value) ? String(value) : undefined;
  if (typeof value === 'bigint') return String(value);
  return undefined;
}

/** `value[name]`, as a template path reads it. */
function property(value: unknown, name: string): unknown {
  return value === null || value === undefined
    ? undefined
    : (value as Record<string, unknown>)[name];
}

/** Argument values of every kind, weighted towards those that make keys. */
const argument = fc.oneof(
  { weight: 3, arbitrary: fc.string({ unit: 'binary', maxLength: 30 }) },
  { weight: 1, arbitrary: fc.string({ unit: 'binary', minLength: 150, maxLength: 250 }) },
  { weight: 2, arbitrary: fc.oneof(fc.integer(), fc.double(), fc.bigInt()) },
  {
    weight: 1,
    arbitrary: fc.constantFrom('undefined', 'null', 'NaN', '[object Object]', '', 'a\uD800'),
  },
  { weight: 3, arbitrary: fc.jsonValue({ maxDepth: 2 }) },
  { weight: 2, arbitrary: anyValue },
);

describe('@Locked() argument values at call time (property-based)', () => {
  let app: INestApplicationContext;
  let orders: Orders;

  beforeAll(async () => {
    view = new Redis(redis.nodes[0].url);
    app = await NestFactory.createApplicationContext(AppModule, { logger: false });
    orders = app.get(Orders);
  });
  afterAll(async () => {
    await app.close();
    await view.quit();
  });

  /**
   * Calls `call` and checks its outcome against `expected` (the key values in
   * template order, undefined for one that cannot be a key): the body ran
   * once under a lock on exactly the expected resources, or the call failed
   * with a LockKeyError and the body did not run.
   */
  async function expectLockedOrRefused(
    call: () => Promise<unknown>,
    texts: readonly (string | undefined)[],
    resourcesOf: (texts: readonly string[]) => string[],
  ): Promise<void> {
    const before = orders.runs.length;
    let error: unknown;
    try {
      await call();
    } catch (caught) {
      error = caught;
    }
    if (error !== undefined) {
      expect(error).toBeInstanceOf(LockKeyError);
      expect(isLockFailure(error)).toBe(true);
      expect(orders.runs.length).toBe(before);
      // A value that could be a key is refused only for its length.
      if (texts.every((t) => t !== undefined))
        expect((error as Error).message).toMatch(/characters/);
      return;
    }
    expect(texts.every((t) => t !== undefined)).toBe(true);
    expect(orders.runs.length).toBe(before + 1);
    const run = orders.runs[before];
    expect(run.held).toBe(true);
    const expected = resourcesOf(texts as string[]);
    expect(run.resources).toHaveLength(expected.length);
    run.resources.forEach((resource, i) => {
      // The prefix as written, then the values percent-encoded: never 'undefined' for a missing one.
      expect(decodeURIComponent(resource)).toBe(expected[i]);
    });
  }

  it("runs pay(id) under 'order:<id>' for a string or number id, and refuses anything else without running", async () => {
    await fc.assert(
      fc.asyncProperty(argument, async (id) => {
        await expectLockedOrRefused(
          () => orders.pay(id),
          [keyText(id)],
          ([text]) => [`order:${text}`],
        );
      }),
      { numRuns: 300 },
    );
  });

  it('follows property paths through any value, refusing a missing or unusable property without running', async () => {
    const order = fc.oneof(
      argument,
      fc.record({ customer: argument }),
      fc.record({ customer: fc.record({ id: argument }) }),
    );
    await fc.assert(
      fc.asyncProperty(order, argument, async (o, cart) => {
        await expectLockedOrRefused(
          () => orders.checkout(o, cart),
          [keyText(property(property(o, 'customer'), 'id')), keyText(cart)],
          ([id, c]) => [`customer:${id}:cart:${c}`],
        );
      }),
      { numRuns: 300 },
    );
  });

  it('locks every template of a multi-resource key or none, never running with one of them missing', async () => {
    const item = fc.oneof(argument, fc.record({ sku: argument }));
    await fc.assert(
      fc.asyncProperty(item, argument, async (i, o) => {
        await expectLockedOrRefused(
          () => orders.reserve(i, o),
          [keyText(property(i, 'sku')), keyText(o)],
          ([sku, id]) => [`stock:${sku}`, `order:${id}`],
        );
      }),
      { numRuns: 200 },
    );
  });

  it('applies the same rules to a method that returns an Observable, failing the stream instead of running', async () => {
    await fc.assert(
      fc.asyncProperty(argument, async (id) => {
        await expectLockedOrRefused(
          () => lastValueFrom(orders.watch(id)),
          [keyText(id)],
          ([text]) => [`order:${text}`],
        );
      }),
      { numRuns: 150 },
    );
  });

  it('runs a function key only with strings of 1 to 512 characters, refusing whatever else it returns', async () => {
    const returned = fc.oneof(
      argument,
      fc.array(fc.string({ unit: 'grapheme-ascii', minLength: 1, maxLength: 20 }), {
        maxLength: 3,
      }),
      fc.constant('k'.repeat(MAX_RESOURCE_LENGTH + 1)),
    );
    await fc.assert(
      fc.asyncProperty(returned, async (key) => {
        const before = orders.runs.length;
        const list = typeof key === 'string' ? [key] : key;
        const valid =
          Array.isArray(list) &&
          list.length > 0 &&
          list.every(
            // '}' first would close the cluster hash tag the key is wrapped in; a lone surrogate
            // would turn into U+FFFD and share its key with others.
            (k) =>
              typeof k === 'string' &&
              k.length > 0 &&
              k.length <= MAX_RESOURCE_LENGTH &&
              !k.startsWith('}') &&
              !/\p{Cs}/u.test(k),
          );
        const outcome = await orders.byFunction(key).then(
          () => undefined,
          (error: unknown) => error,
        );
        if (!valid) {
          expect(outcome).toBeInstanceOf(LockKeyError);
          expect(orders.runs.length).toBe(before);
          return;
        }
        expect(outcome).toBeUndefined();
        expect(orders.runs[before].held).toBe(true);
        expect(orders.runs[before].resources).toEqual([...new Set(list as string[])]);
      }),
      { numRuns: 200 },
    );
  });

  it(`refuses a key value of more than ${MAX_KEY_VALUE_LENGTH} characters without running`, async () => {
    const before = orders.runs.length;
    await expect(orders.pay('v'.repeat(MAX_KEY_VALUE_LENGTH + 1))).rejects.toBeInstanceOf(
      LockKeyError,
    );
    expect(orders.runs.length).toBe(before);
  });
});
