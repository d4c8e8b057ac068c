import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { LockBusyError, LockEngine, LockOptionsError } from '../../lib/engine/index.js';
import { semaphore } from '../../lib/engine/lease-parts.js';
import type { Permit } from '../../lib/engine/semaphore.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';
import { quietLogger } from '../support/quiet-logger.js';

const redis = useRedisNodes(3);
const unique = (name: string) => `${name}:${randomUUID()}`;
const SLOW_POLLING = { delay: 3000, factor: 1, maxDelay: 3000, jitter: 0 };

describe('semaphores', () => {
  const engines: LockEngine[] = [];
  let a: LockEngine;
  let b: LockEngine;
  beforeAll(async () => {
    for (let i = 0; i < 2; i++) {
      const engine = new LockEngine({
        nodes: redis.nodes.map((n) => n.url),
        logger: quietLogger(),
        fenceCounter: 'resource',
        fenceCounterTtl: 0,
      });
      await engine.connect();
      engines.push(engine);
    }
    [a, b] = engines;
  });
  afterAll(async () => {
    await Promise.all(engines.map((e) => e.close()));
  });

  it('hands out N permits across engines, in distinct slots, then refuses', async () => {
    const name = unique('n');
    const p1 = await semaphore(a, name, 2).acquire();
    const p2 = await semaphore(b, name, 2).acquire();
    expect(new Set([p1.slot, p2.slot])).toEqual(new Set([1, 2]));
    expect(p2.token!).toBeGreaterThan(p1.token!);
    await expect(semaphore(a, name, 2).tryAcquire()).rejects.toBeInstanceOf(LockBusyError);
    await p1.release();
    const p3 = await semaphore(b, name, 2).tryAcquire();
    expect(p3.slot).toBe(p1.slot);
    await Promise.all([p2.release(), p3.release()]);
  });

  it('wakes the first waiter when a permit comes back, and serves waiters in arrival order', async () => {
    const name = unique('line');
    const held = await semaphore(a, name, 1).acquire();
    const order: string[] = [];
    const waiter = (engine: LockEngine, label: string) =>
      semaphore(engine, name, 1)
        .acquire({ retry: SLOW_POLLING })
        .then(async (permit) => {
          order.push(label);
          await permit.release();
        });
    const first = waiter(b, 'first');
    await waitForLine(name, 1);
    const second = waiter(a, 'second');
    await waitForLine(name, 2);
    const started = performance.now();
    await held.release();
    await Promise.all([first, second]);
    expect(performance.now() - started).toBeLessThan(1500);
    expect(order).toEqual(['first', 'second']);
  });

  it.each([
    ['in another process', () => a],
    ['in the same process', () => b],
  ])(
    'a permit freed without a word goes to the waiter in line as soon as a later caller finds it free (the later caller %s)',
    async (_where, later) => {
      const name = unique('missed');
      // Releases that tell nobody (as one lost on the way would): only the nodes know the permit is free.
      const silent = new LockEngine({
        nodes: redis.nodes.map((n) => n.url),
        logger: quietLogger(),
        fenceCounter: 'resource',
        fenceCounterTtl: 0,
        releaseNotifications: false,
      });
      await silent.connect();
      try {
        const held = await semaphore(silent, name, 1).acquire({ ttl: 30_000 });
        const order: string[] = [];
        // Polls every 20 s: it would not ask again within this test on its own.
        const slow = { delay: 20_000, factor: 1, maxDelay: 20_000, jitter: 0 };
        const waiting = semaphore(b, name, 1)
          .acquire({ retry: slow, waitTimeout: 30_000 })
          .then(async (permit) => {
            order.push('first in line');
            await permit.release();
          });
        await waitForLine(name, 1);
        await held.release();
        const started = performance.now();
        // Refused (the permit is the waiter's by the line), its attempt has the nodes name the
        // waiter, who asks at once; its release then wakes this caller.
        const permit = await semaphore(later(), name, 1).acquire({ waitTimeout: 10_000 });
        order.push('later caller');
        await permit.release();
        await waiting;
        expect(order).toEqual(['first in line', 'later caller']);
        expect(performance.now() - started).toBeLessThan(10_000);
      } finally {
        await silent.close();
      }
    },
  );

  it('lowering N admits nobody until the permits above it are back; raising it admits at once', async () => {
    const name = unique('resize');
    const held = await Promise.all([1, 2, 3].map(() => semaphore(a, name, 3).acquire()));
    // Lowered to 2: three are held, nobody is evicted, nobody else gets in.
    await expect(semaphore(b, name, 2).tryAcquire()).rejects.toBeInstanceOf(LockBusyError);
    await held[0].release();
    await expect(semaphore(b, name, 2).tryAcquire()).rejects.toBeInstanceOf(LockBusyError);
    await held[1].release();
    const fits = await semaphore(b, name, 2).tryAcquire();
    // Raised to 4: two more at once.
    const more = await Promise.all([1, 2].map(() => semaphore(a, name, 4).tryAcquire()));
    expect(new Set([held[2], fits, ...more].map((p) => p.slot)).size).toBe(4);
    await Promise.all([held[2], fits, ...more].map((p) => p.release()));
  });

  it('using() extends a permit past its ttl and gives it back', async () => {
    const name = unique('using');
    const slot = await semaphore(a, name, 1).using(
      async (permit) => {
        // Twice the lease, held by extensions alone; a lease no stall of a loaded machine
        // outlasts between two of them.
        await new Promise((resolve) => setTimeout(resolve, 2000));
        expect(permit.signal.aborted).toBe(false);
        return permit.slot;
      },
      { ttl: 1000 },
    );
    expect(slot).toBe(1);
    await (await semaphore(b, name, 1).tryAcquire()).release();
  });

  it('says what to change for a wrong number of permits', () => {
    expect(() => semaphore(a, 'x', 0)).toThrow(LockOptionsError);
    expect(() => semaphore(a, 'x', 1.5)).toThrow(/whole number of permits from 1 to/);
    // A number in a string is named as a string (from an environment variable, say).
    expect(() => semaphore(a, 'x', '4' as never)).toThrow(/\(got '4' for 'x'\)/);
  });

  it('grants, refuses and numbers single attempts as an in-memory semaphore does', async () => {
    /** Held slots, the last token issued, and how many attempts were made. */
    interface Model {
      held: Set<number>;
      last: number;
      attempts: number;
    }
    interface Real {
      name: string;
      permits: Permit[];
    }
    class Try implements fc.AsyncCommand<Model, Real> {
      constructor(
        readonly n: number,
        readonly engine: number,
      ) {}
      check = () => true;
      async run(model: Model, real: Real) {
        const attempt = semaphore(engines[this.engine], real.name, this.n).tryAcquire();
        model.attempts++;
        if (model.held.size >= this.n) {
          await expect(attempt).rejects.toBeInstanceOf(LockBusyError);
          return;
        }
        const permit = await attempt;
        // The lowest free slot (no waiter ranks ahead), and a token above every earlier one.
        // Not always the next one: a grant resolves on a quorum while its command to the last
        // node is still in flight, so the next caller's attempt can reach that node first, be
        // granted there alone (refused overall) and raise that node's counter. An attempt raises
        // a counter by one at most, so no token exceeds the number of attempts.
        let lowest = 1;
        while (model.held.has(lowest)) lowest++;
        expect(permit.slot).toBe(lowest);
        expect(permit.token).toBeGreaterThan(model.last);
        expect(permit.token).toBeLessThanOrEqual(model.attempts);
        model.held.add(permit.slot);
        model.last = permit.token!;
        real.permits.push(permit);
      }
      toString = () => `try N=${this.n} @${this.engine}`;
    }
    class Release implements fc.AsyncCommand<Model, Real> {
      constructor(readonly pick: number) {}
      check = (model: Readonly<Model>) => model.held.size > 0;
      async run(model: Model, real: Real) {
        const [permit] = real.permits.splice(this.pick % real.permits.length, 1);
        expect((await permit.release()).released).toBe(true);
        model.held.delete(permit.slot);
      }
      toString = () => `release #${this.pick}`;
    }
    await fc.assert(
      fc.asyncProperty(
        fc.commands(
          [
            fc
              .tuple(fc.integer({ min: 1, max: 4 }), fc.integer({ min: 0, max: 1 }))
              .map(([n, engine]) => new Try(n, engine)),
            fc.nat().map((pick) => new Release(pick)),
          ],
          { maxCommands: 25 },
        ),
        async (cmds) => {
          const real: Real = { name: unique('model'), permits: [] };
          try {
            await fc.asyncModelRun(
              () => ({ model: { held: new Set<number>(), last: 0, attempts: 0 }, real }),
              cmds,
            );
          } finally {
            await Promise.all(real.permits.map((p) => p.release()));
          }
        },
      ),
      { numRuns: 30 },
    );
  });
});

/** Resolves once the first node's line for semaphore `name` has `count` waiters. */
async function waitForLine(name: string, count: number): Promise<void> {
  const { Redis } = await import('ioredis');
  const client = new Redis(redis.nodes[0].url);
  try {
    const deadline = performance.now() + 5000;
    while (performance.now() < deadline) {
      if ((await client.hlen(`lock:{${name}}:sem:q`)) >= count) return;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    throw new Error(`${count} waiter(s) did not join the line of ${name}`);
  } finally {
    client.disconnect();
  }
}
