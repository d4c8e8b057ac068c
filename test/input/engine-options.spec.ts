/**
 * Bad engine options, found by property: whatever `new LockEngine(options)`
 * is given, it either constructs or throws a LockOptionsError whose message
 * names the option to change; never another exception. No Redis is needed:
 * the engine opens its connections on connect().
 */
import { describe, expect, it } from '@jest/globals';
import fc from 'fast-check';
import { LOCK_DEFAULTS, LockEngine, LockOptionsError } from '../../lib/engine/index.js';
import { quietLogger } from '../support/quiet-logger.js';
import {
  anyValue,
  badMs,
  badNumber,
  badRetry,
  MAX_TIMER_MS,
  notABoolean,
  validRetry,
} from './arbitraries.js';

const KNOWN_OPTIONS = [
  'nodes',
  'keyPrefix',
  'ttl',
  'nodeTimeout',
  'driftFactor',
  'waitTimeout',
  'retry',
  'fencing',
  'fenceCounterTtl',
  'extendThreshold',
  'releaseNotifications',
  'strict',
  'checkNodes',
  'logger',
];

type Outcome = { engine: LockEngine; error?: undefined } | { engine?: undefined; error: unknown };

/** Constructs (and closes again: no connection is opened before connect()) or returns what was thrown. */
async function construct(options: unknown): Promise<Outcome> {
  let engine: LockEngine;
  try {
    engine = new LockEngine(options as never);
  } catch (error) {
    return { error };
  }
  await engine.close();
  return { engine };
}

/** Asserts a LockOptionsError whose message names `option`. */
function expectOptionError(outcome: Outcome, option: string): void {
  expect(outcome.error).toBeInstanceOf(LockOptionsError);
  expect((outcome.error as Error).message).toContain(option);
}

// --- Values -------------------------------------------------------------------------------------

const validNode = fc.oneof(
  fc.constantFrom(
    'redis://127.0.0.1:6379',
    'rediss://cache.internal:6380/2',
    'redis://user:secret@10.0.0.7:7000',
  ),
  fc.record({
    host: fc.constantFrom('127.0.0.1', 'localhost'),
    port: fc.integer({ min: 1, max: 65535 }),
  }),
  fc.constant({ path: '/run/redis/redis.sock' }),
);
const badNode = fc.oneof(
  fc.constant(null),
  fc.integer(),
  fc.boolean(),
  fc.array(fc.string(), { maxLength: 2 }),
  fc.constantFrom('', 'localhost:6379', 'http://127.0.0.1:6379', 'tcp://x:1', 'redis://[::1'),
  fc.constant({}),
  fc.record({ host: fc.constant('127.0.0.1'), port: badMs(1) }),
  fc.record({ host: fc.constant('127.0.0.1'), port: fc.integer({ min: 65536, max: 1e9 }) }),
);

/** Options that are each fine on their own and together. */
const validOptions = fc
  .record(
    {
      nodes: fc.array(validNode, { minLength: 1, maxLength: 5 }),
      keyPrefix: fc.string({ maxLength: 20 }).filter((s) => !/[{}]/.test(s)),
      ttl: fc.integer({ min: 10, max: MAX_TIMER_MS }),
      driftFactor: fc.double({ min: 0, max: 0.5, noNaN: true }),
      waitTimeout: fc.integer({ min: 0, max: MAX_TIMER_MS }),
      retry: validRetry(),
      fencing: fc.boolean(),
      fenceCounterTtl: fc.oneof(
        fc.constant(0),
        fc.integer({ min: 60_000, max: Number.MAX_SAFE_INTEGER }),
      ),
      extendThreshold: fc.double({ min: 0.1, max: 0.9, noNaN: true }),
      releaseNotifications: fc.boolean(),
      strict: fc.boolean(),
      checkNodes: fc.boolean(),
    },
    { requiredKeys: ['nodes'] },
  )
  .chain((options) =>
    // nodeTimeout is bounded by half the ttl.
    fc
      .option(fc.integer({ min: 1, max: Math.floor((options.ttl ?? LOCK_DEFAULTS.ttl) / 2) }), {
        nil: undefined,
      })
      .map((nodeTimeout) => ({ ...options, nodeTimeout })),
  )
  .map((options) => ({ ...options, logger: quietLogger() }));

/**
 * One option set wrong, with the name its error message must give. Each is
 * applied to otherwise valid options whose ttl is the default (nodeTimeout's
 * upper bound then is 2500).
 */
type BadOption = [option: string, patch: Record<string, unknown>];
const bad = (option: string, patch: Record<string, unknown>): BadOption => [option, patch];
const oneBadOption: fc.Arbitrary<BadOption> = fc.oneof(
  badMs(10).map((ttl) => bad('ttl', { ttl })),
  fc
    .oneof(badMs(1), fc.constant(null), fc.integer({ min: 2501, max: MAX_TIMER_MS }))
    .map((nodeTimeout) => bad('nodeTimeout', { ttl: undefined, nodeTimeout })),
  badNumber(0, 0.5).map((driftFactor) => bad('driftFactor', { driftFactor })),
  badMs(0).map((waitTimeout) => bad('waitTimeout', { waitTimeout })),
  badRetry('retry').map(([name, retry]) => bad(name, { retry })),
  fc
    .tuple(fc.constantFrom('fencing', 'releaseNotifications', 'strict', 'checkNodes'), notABoolean)
    .map(([name, value]) => bad(name, { [name]: value })),
  fc
    .oneof(badMs(1), fc.integer({ min: 1, max: 59_999 }))
    .filter((v) => v !== 0)
    .map((fenceCounterTtl) => bad('fenceCounterTtl', { fenceCounterTtl })),
  badNumber(0.1, 0.9).map((extendThreshold) => bad('extendThreshold', { extendThreshold })),
  fc
    .oneof(
      fc.integer(),
      fc.boolean(),
      fc.object({ maxDepth: 1 }),
      fc.string().map((s) => `${s}{`),
      fc.string().map((s) => `}${s}`),
    )
    .map((keyPrefix) => bad('keyPrefix', { keyPrefix })),
  fc
    .oneof(
      fc.string(),
      fc.integer(),
      fc.constant({}),
      fc.constant({ warn: () => undefined }),
      fc.constant({ error: () => undefined }),
      fc.constant({ warn: 'console', error: 'console' }),
    )
    .map((logger) => bad('logger', { logger })),
  fc
    .oneof(fc.constant([]), fc.string(), fc.integer(), fc.object({ maxDepth: 1 }))
    .map((nodes) => bad('nodes', { nodes })),
  fc
    .tuple(fc.array(validNode, { maxLength: 3 }), badNode, fc.array(validNode, { maxLength: 3 }))
    .map(([before, node, after]) =>
      bad(`nodes[${before.length}]`, { nodes: [...before, node, ...after] }),
    ),
  fc
    .string({ minLength: 1, maxLength: 12 })
    .filter((key) => !KNOWN_OPTIONS.includes(key) && key !== '__proto__')
    .chain((key) =>
      fc
        .oneof(fc.integer(), fc.string(), fc.boolean(), fc.constant(null))
        .map((value) => bad(`'${key}'`, { [key]: value })),
    ),
);

describe('engine options (property-based)', () => {
  it('constructs with any combination of valid options, keeping what was given', async () => {
    await fc.assert(
      fc.asyncProperty(validOptions, async (options) => {
        const outcome = await construct(options);
        expect(outcome.error).toBeUndefined();
        const resolved = outcome.engine!.options;
        expect(resolved.ttl).toBe(options.ttl ?? LOCK_DEFAULTS.ttl);
        expect(resolved.keyPrefix).toBe(options.keyPrefix ?? LOCK_DEFAULTS.keyPrefix);
        expect(resolved.nodeTimeout).toBe(options.nodeTimeout);
        expect(resolved.retry.delay).toBe(options.retry?.delay ?? LOCK_DEFAULTS.retry.delay);
        expect(outcome.engine!.quorum).toBe(Math.floor(options.nodes.length / 2) + 1);
      }),
      { numRuns: 300 },
    );
  });

  it('refuses any one option set wrong with a LockOptionsError that names it', async () => {
    await fc.assert(
      fc.asyncProperty(validOptions, oneBadOption, async (options, [option, patch]) => {
        expectOptionError(await construct({ ...options, ...patch }), option);
      }),
      { numRuns: 1000 },
    );
  });

  it('says that nodeTimeout is bounded by half the ttl', async () => {
    const outcome = await construct({
      nodes: ['redis://127.0.0.1:1'],
      ttl: 5000,
      nodeTimeout: 4000,
    });
    expectOptionError(
      outcome,
      'nodeTimeout (at most half the ttl) must be a whole number of milliseconds from 1 to 2500',
    );
  });

  it('ends in a constructed engine or a LockOptionsError whatever each option holds, never another exception', async () => {
    const anyOptions = fc.record(
      {
        nodes: fc.oneof(
          fc.array(fc.oneof(validNode, badNode, anyValue), { maxLength: 3 }),
          anyValue,
        ),
        ...Object.fromEntries(KNOWN_OPTIONS.filter((k) => k !== 'nodes').map((k) => [k, anyValue])),
      },
      { requiredKeys: [] },
    );
    await fc.assert(
      fc.asyncProperty(fc.oneof(anyOptions, anyValue), async (options) => {
        const { error } = await construct(options);
        if (error !== undefined) expect(error).toBeInstanceOf(LockOptionsError);
      }),
      { numRuns: 1000 },
    );
  });

  it('names the node spec of any URL it refuses, and constructs from every redis:// or rediss:// URL with a port in range', async () => {
    const url = fc.record({
      scheme: fc.constantFrom('redis', 'rediss', 'REDIS', 'http', 'https', 'unix', 'tcp'),
      // Credentials as a URL carries them: percent-encoded.
      auth: fc.option(
        fc
          .tuple(
            fc.string({ unit: 'binary', maxLength: 8 }),
            fc.string({ unit: 'binary', maxLength: 8 }),
          )
          .map(
            ([user, password]) => `${encodeURIComponent(user)}:${encodeURIComponent(password)}@`,
          ),
        { nil: '' },
      ),
      host: fc.constantFrom('127.0.0.1', 'localhost', '[::1]', 'redis.internal'),
      port: fc.option(fc.integer({ min: -10, max: 70_000 }), { nil: undefined }),
      db: fc.constantFrom('', '/0', '/15', '/x'),
    });
    await fc.assert(
      fc.asyncProperty(fc.array(validNode, { maxLength: 2 }), url, async (before, parts) => {
        const text = `${parts.scheme}://${parts.auth}${parts.host}${parts.port === undefined ? '' : `:${parts.port}`}${parts.db}`;
        const outcome = await construct({ nodes: [...before, text], logger: quietLogger() });
        const acceptable =
          /^rediss?$/i.test(parts.scheme) &&
          (parts.port === undefined || (parts.port >= 0 && parts.port <= 65535));
        if (acceptable) expect(outcome.error).toBeUndefined();
        else expectOptionError(outcome, `nodes[${before.length}]`);
      }),
      { numRuns: 500 },
    );
  });

  it('never echoes the password of a URL it refuses', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.stringMatching(/^[A-Za-z0-9]{12,20}$/),
        fc.constantFrom('http', 'tcp', 'redis'),
        fc.constantFrom(':99999', ':-1', ':abc'),
        async (password, scheme, port) => {
          const outcome = await construct({
            nodes: [`${scheme}://user:${password}@127.0.0.1${port}`],
          });
          expect(outcome.error).toBeInstanceOf(LockOptionsError);
          expect((outcome.error as Error).message).not.toContain(password);
        },
      ),
      { numRuns: 100 },
    );
  });
});
