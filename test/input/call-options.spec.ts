/**
 * Bad arguments to the engine's calls, found by property, against a real
 * redis-server: per-call options of acquire(), tryAcquire() and using(),
 * resource names, extend() ttls and admin look-ups. Each call ends in a lock
 * or a typed LockError (a LockOptionsError naming what to change when the
 * input is at fault), never another exception and never an unhandled
 * rejection; using() never runs its routine without the lock.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import fc from 'fast-check';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import {
  Lock,
  LockAbortedError,
  LockEngine,
  LockOptionsError,
  MAX_RESOURCE_LENGTH,
  readWriteLock,
  semaphore,
} from '../../lib/engine/index.js';
import { quietLogger } from '../support/quiet-logger.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';
import { anyValue, badMs, badRetry, MAX_TIMER_MS, notANumber, validRetry } from './arbitraries.js';
import { failOnUnhandledRejections } from './unhandled-rejections.js';

const redis = useRedisNodes(1);
const rejections = failOnUnhandledRejections();

let engine: LockEngine;
let view: Redis;

const unique = (name: string) => `${name}:${randomUUID()}`;
const keyOf = (resource: string) => `lock:{${resource}}`;

/** What a call did: its value or its error, whether thrown at once or rejected. */
async function settle<T>(call: () => T | Promise<T>): Promise<{ value?: T; error?: unknown }> {
  try {
    return { value: await call() };
  } catch (error) {
    return { error };
  }
}

// --- Per-call options, each tagged with whether it is valid -------------------------------------

interface Field {
  readonly value: unknown;
  /** The name a LockOptionsError must give when this value is wrong; undefined when it is fine. */
  readonly wrong: string | undefined;
}

const fine = (value: unknown): Field => ({ value, wrong: undefined });
const wrong =
  (name: string) =>
  (value: unknown): Field => ({ value, wrong: name });

// From 5 s up, a valid ttl leaves a round the engine's nodeTimeout (2.5 s), so a lock on an
// idle node is granted at the first attempt, whatever the retry options.
const ttlField = fc.oneof(
  fc.integer({ min: 5000, max: MAX_TIMER_MS }).map(fine),
  badMs(10).map(wrong('ttl')),
);
const waitTimeoutField = fc.oneof(
  fc.integer({ min: 0, max: 5000 }).map(fine),
  badMs(0).map(wrong('waitTimeout')),
);
const retryField = fc.oneof(
  validRetry(1000).map(fine),
  badRetry('retry').map(([name, value]) => wrong(name)(value)),
);
const signalField = fc.oneof(
  fc.constant(null).map(() => fine(new AbortController().signal)),
  fc.constant(null).map(() => fine(AbortSignal.abort(new Error('cancelled by the caller')))),
  fc
    .oneof(
      notANumber,
      fc.constant({ aborted: false, addEventListener: () => undefined }),
      fc.constant(new AbortController()),
    )
    .map(wrong('signal')),
);

const callOptions = (fields: Record<string, fc.Arbitrary<Field>>) =>
  fc.record(fields, { requiredKeys: [] }).map((picked) => {
    const options: Record<string, unknown> = {};
    const wrongNames: string[] = [];
    for (const [name, field] of Object.entries(picked)) {
      if (!field) continue;
      options[name] = field.value;
      if (field.wrong) wrongNames.push(field.wrong);
    }
    const signal = options.signal as AbortSignal | undefined;
    return { options, wrongNames, aborted: signal instanceof AbortSignal && signal.aborted };
  });

type Case = { options: Record<string, unknown>; wrongNames: string[]; aborted: boolean };

/**
 * The outcome a call with these options must have: a LockOptionsError naming
 * one of the wrong options; else LockAbortedError for an aborted signal; else
 * the lock.
 */
function expectOutcome(
  outcome: { value?: unknown; error?: unknown },
  { wrongNames, aborted }: Case,
): void {
  if (wrongNames.length > 0) {
    expect(outcome.error).toBeInstanceOf(LockOptionsError);
    const message = (outcome.error as Error).message;
    expect(wrongNames.some((name) => message.includes(name))).toBe(true);
  } else if (aborted) {
    expect(outcome.error).toBeInstanceOf(LockAbortedError);
  } else {
    expect(outcome.error).toBeUndefined();
  }
}

// Inside a describe, so the clients close before useRedisNodes stops the node.
describe('engine calls with bad input', () => {
  beforeAll(async () => {
    // nodeTimeout 2.5 s: a valid call is granted at its first attempt even on a loaded machine.
    engine = new LockEngine({
      nodes: [redis.nodes[0].url],
      nodeTimeout: 2500,
      logger: quietLogger(),
    });
    await engine.connect();
    view = new Redis(redis.nodes[0].url);
  });
  afterAll(async () => {
    await engine.close();
    await view.quit();
  });

  describe('per-call options (property-based)', () => {
    it('acquire() refuses a wrong ttl, waitTimeout, retry or signal with a LockOptionsError naming it, and grants otherwise', async () => {
      const cases = callOptions({
        ttl: ttlField,
        waitTimeout: waitTimeoutField,
        retry: retryField,
        signal: signalField,
      });
      await fc.assert(
        fc.asyncProperty(cases, async (c) => {
          const resource = unique('acquire');
          const outcome = await settle(() => engine.acquire(resource, c.options));
          expectOutcome(outcome, c);
          if (outcome.value) {
            const lock = outcome.value;
            expect(await view.get(keyOf(resource))).toBe(lock.value);
            expect(lock.ttl).toBe(c.options.ttl ?? engine.options.ttl);
            await lock.release();
          } else {
            // Nothing was written for a call that failed.
            expect(await view.exists(keyOf(resource))).toBe(0);
          }
        }),
        { numRuns: 300 },
      );
    });

    it('tryAcquire() checks ttl and signal the same way, and refuses any option of a wait, valid or not', async () => {
      // One attempt waits for nothing: an option about waiting is an error, whatever its value.
      const ofAWait = (name: string) => (field: Field) => wrong(name)(field.value);
      const cases = callOptions({
        ttl: ttlField,
        signal: signalField,
        waitTimeout: waitTimeoutField.map(ofAWait('waitTimeout')),
        retry: retryField.map(ofAWait('retry')),
      });
      await fc.assert(
        fc.asyncProperty(cases, async (c) => {
          const outcome = await settle(() => engine.tryAcquire(unique('try'), c.options));
          expectOutcome(outcome, c);
          if (outcome.value) await outcome.value.release();
        }),
        { numRuns: 200 },
      );
    });

    it('using() runs the routine exactly once, under the held lock, only when the options are valid', async () => {
      const cases = callOptions({
        ttl: ttlField,
        waitTimeout: waitTimeoutField,
        retry: retryField,
        signal: signalField,
        autoExtend: fc.boolean().map(fine),
      });
      await fc.assert(
        fc.asyncProperty(cases, async (c) => {
          const resource = unique('using');
          const runs: boolean[] = [];
          const outcome = await settle(() =>
            engine.using(
              resource,
              async (lock) => {
                runs.push(lock.isHeld && (await view.get(keyOf(resource))) === lock.value);
                return 'done';
              },
              c.options,
            ),
          );
          expectOutcome(outcome, c);
          expect(runs).toEqual(outcome.error ? [] : [true]);
          expect(await view.exists(keyOf(resource))).toBe(0);
        }),
        { numRuns: 200 },
      );
    });

    it('rejects an options argument that is not an object with a LockOptionsError, taking no lock', async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.oneof(fc.constant(null), fc.integer(), fc.string(), fc.boolean(), fc.bigInt()),
          async (options) => {
            const resource = unique('not-an-object');
            const outcome = await settle(() => engine.acquire(resource, options as never));
            expect(outcome.error).toBeInstanceOf(LockOptionsError);
            expect(await view.exists(keyOf(resource))).toBe(0);
          },
        ),
        { numRuns: 50 },
      );
    });
  });

  it('using() refuses a routine that is not a function with a LockOptionsError, before taking any lock', async () => {
    let grants = 0;
    const counted = () => grants++;
    engine.on('acquired', counted);
    try {
      await fc.assert(
        fc.asyncProperty(
          anyValue.filter((v) => typeof v !== 'function'),
          async (routine) => {
            const resource = unique('no-routine');
            for (const call of [
              () => engine.using(resource, routine as never),
              () => readWriteLock(engine, resource).using('write', routine as never),
              () => semaphore(engine, resource, 2).using(routine as never),
            ]) {
              const outcome = await settle(call);
              expect(outcome.error).toBeInstanceOf(LockOptionsError);
              expect((outcome.error as Error).message).toMatch(
                /^using\(\) runs the function given after the resource under the lock \(got .+\): pass one/,
              );
            }
          },
        ),
        { numRuns: 30 },
      );
      expect(grants).toBe(0);
    } finally {
      engine.off('acquired', counted);
    }
  });

  // --- Resource names ----------------------------------------------------------------------------

  /** Well-formed strings (whole code points) of 1 to MAX_RESOURCE_LENGTH UTF-16 units. */
  const goodName = fc
    .string({ unit: 'binary', minLength: 1, maxLength: 80 })
    .filter((s) => s.length <= MAX_RESOURCE_LENGTH);
  const longestName = fc
    .constant(null)
    .map(() => `x${randomUUID()}`.padEnd(MAX_RESOURCE_LENGTH, 'y'));
  const badName = fc.oneof(
    fc.constant(''),
    fc.integer({ min: MAX_RESOURCE_LENGTH + 1, max: 100_000 }).map((n) => 'z'.repeat(n)),
    anyValue.filter((v) => typeof v !== 'string' && !Array.isArray(v)),
  );

  describe('resource names (property-based)', () => {
    it('locks every well-formed name of 1 to 512 characters under its own key, and refuses empty, over-long and non-string names with a LockOptionsError', async () => {
      const one = fc.oneof(
        goodName.map((name) => ({ name, ok: true })),
        longestName.map((name) => ({ name, ok: true })),
        badName.map((name) => ({ name, ok: false })),
      );
      const names = fc.oneof(
        one.map(({ name, ok }) => ({ resources: name, list: [name], ok })),
        fc.array(one, { maxLength: 4 }).map((items) => ({
          resources: items.map((i) => i.name),
          list: items.map((i) => i.name),
          ok: items.length > 0 && items.every((i) => i.ok),
        })),
      );
      await fc.assert(
        fc.asyncProperty(names, async ({ resources, list, ok }) => {
          const outcome = await settle(() => engine.tryAcquire(resources as string[]));
          if (!ok) {
            expect(outcome.error).toBeInstanceOf(LockOptionsError);
            expect((outcome.error as Error).message).toMatch(/resource/);
            return;
          }
          expect(outcome.error).toBeUndefined();
          const lock = outcome.value!;
          const distinct = [...new Set(list as string[])];
          expect(lock.resources).toEqual(distinct);
          expect(await Promise.all(distinct.map((r) => view.get(keyOf(r))))).toEqual(
            distinct.map(() => lock.value),
          );
          await lock.release();
        }),
        { numRuns: 300 },
      );
    });

    it('never makes two distinct well-formed names contend for one lock', async () => {
      await fc.assert(
        fc.asyncProperty(goodName, goodName, async (a, b) => {
          fc.pre(a !== b);
          // A prefix of this run's own keeps names of earlier runs from holding either.
          const run = randomUUID();
          const first = await engine.tryAcquire(`${run}${a}`);
          const second = await settle(() => engine.tryAcquire(`${run}${b}`));
          await first.release();
          expect(second.error).toBeUndefined();
          await second.value!.release();
        }),
        { numRuns: 200 },
      );
    });

    it('refuses a bad resource name in inspect() and forceRelease() with a LockOptionsError', async () => {
      await fc.assert(
        fc.asyncProperty(
          badName,
          fc.constantFrom('inspect', 'forceRelease'),
          async (name, call) => {
            const outcome = await settle<unknown>(() => engine[call](name as string));
            expect(outcome.error).toBeInstanceOf(LockOptionsError);
          },
        ),
        { numRuns: 100 },
      );
    });
  });

  // --- Locks handed back --------------------------------------------------------------------------

  describe('extend() and release() arguments (property-based)', () => {
    it('extend() refuses a wrong ttl with a LockOptionsError naming ttl and keeps the lock; a valid ttl renews the lease', async () => {
      const ttl = fc.oneof(
        fc.integer({ min: 5000, max: MAX_TIMER_MS }).map(fine),
        badMs(10).map(wrong('ttl')),
      );
      await fc.assert(
        fc.asyncProperty(ttl, async ({ value, wrong: wrongName }) => {
          const resource = unique('extend');
          const lock = await engine.tryAcquire(resource, { ttl: 5000 });
          const before = performance.now();
          const outcome = await settle(() => engine.extend(lock, value as number));
          if (wrongName) {
            expect(outcome.error).toBeInstanceOf(LockOptionsError);
            expect((outcome.error as Error).message).toContain(wrongName);
            expect(lock.isHeld).toBe(true);
          } else {
            const ttl = value as number;
            expect(outcome.value).toBe(lock);
            // The new lease counts from the extension's start, less the drift allowance.
            const drift = Math.floor(ttl * engine.options.driftFactor) + 2;
            expect(lock.remainingTime).toBeGreaterThanOrEqual(
              ttl - drift - (performance.now() - before),
            );
            const pttl = await view.pttl(keyOf(resource));
            expect(pttl).toBeGreaterThanOrEqual(ttl - Math.ceil(performance.now() - before) - 1);
          }
          expect(await view.get(keyOf(resource))).toBe(lock.value);
          await lock.release();
        }),
        { numRuns: 100 },
      );
    });

    it('extend() and release() refuse anything but a Lock the engine granted with a LockOptionsError', async () => {
      // null and undefined are left to the pending spec: extend() reads their ttl before checking.
      const notALock = fc.oneof(
        anyValue.filter((v) => v !== null && v !== undefined),
        fc.constant({ resources: ['x'], value: 'v', tokens: [1], ttl: 5000, release: () => 1 }),
      );
      await fc.assert(
        fc.asyncProperty(notALock, fc.constantFrom('extend', 'release'), async (value, call) => {
          expect(value instanceof Lock).toBe(false);
          const outcome = await settle<unknown>(() => engine[call](value as Lock));
          expect(outcome.error).toBeInstanceOf(LockOptionsError);
        }),
        { numRuns: 100 },
      );
    });
  });
});

describe('the unhandled-rejection watch these suites rely on', () => {
  it('hears a promise rejected without a handler (self-check)', async () => {
    const rejected = Promise.reject(new Error('left unhandled on purpose'));
    const seen = await rejections.flush();
    rejected.catch(() => undefined);
    // Handled now: Node reports 'rejectionHandled' and Jest forgets it.
    await new Promise((resolve) => setImmediate(resolve));
    expect(seen).toEqual([expect.objectContaining({ message: 'left unhandled on purpose' })]);
  });
});
