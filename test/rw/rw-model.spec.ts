/**
 * Model-based property test: random sequences of single attempts and
 * releases, by several engines on the same three real nodes, against an
 * in-memory read-write lock. Each step's outcome (granted or busy, the mode,
 * the token) must be the model's.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { LockBusyError, LockEngine } from '../../lib/engine/index.js';
import { readWriteLock } from '../../lib/engine/lease-parts.js';
import type { LockMode, ReadWriteHold } from '../../lib/engine/read-write-lock.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';
import { quietLogger } from '../support/quiet-logger.js';

const redis = useRedisNodes(3);

/**
 * What the lock should look like: holders by mode, the last write's token, the highest token
 * issued, and how many write attempts were made (each may raise a node's counter once, even when
 * refused: an attempt granted on a minority of nodes is cleaned up, its increment stays).
 */
class RwModel {
  readers = 0;
  writer = false;
  lastWrite = 0;
  maxIssued = 0;
  writeAttempts = 0;
  canTake(mode: LockMode): boolean {
    return mode === 'read' ? !this.writer : !this.writer && this.readers === 0;
  }
}

interface Real {
  readonly engines: LockEngine[];
  readonly resource: string;
  readonly held: ReadWriteHold[];
}

class TryAcquire implements fc.AsyncCommand<RwModel, Real> {
  constructor(
    readonly mode: LockMode,
    readonly engine: number,
  ) {}
  check = () => true;
  async run(model: RwModel, real: Real): Promise<void> {
    const lock = readWriteLock(real.engines[this.engine], real.resource);
    if (this.mode === 'write') model.writeAttempts++;
    if (!model.canTake(this.mode)) {
      await expect(lock.tryAcquire(this.mode)).rejects.toBeInstanceOf(LockBusyError);
      return;
    }
    const hold = await lock.tryAcquire(this.mode);
    expect(hold.mode).toBe(this.mode);
    // Tokens count from 1 on each resource (fenceCounterTtl 0): no token exceeds the number of
    // write attempts so far, and a reader before any write gets 0.
    expect(hold.token!).toBeLessThanOrEqual(model.writeAttempts);
    if (this.mode === 'write') {
      // Above every token issued before, to readers and writers.
      expect(hold.token!).toBeGreaterThan(model.maxIssued);
      model.lastWrite = hold.token!;
      model.writer = true;
    } else {
      // At least the last write's. Exactly it while every node saw the same attempts; a busy
      // writer's attempt that reached a node before the holder's own command can raise it there.
      expect(hold.token!).toBeGreaterThanOrEqual(model.lastWrite);
      model.readers++;
    }
    model.maxIssued = Math.max(model.maxIssued, hold.token!);
    real.held.push(hold);
  }
  toString = () => `try ${this.mode} @${this.engine}`;
}

class Release implements fc.AsyncCommand<RwModel, Real> {
  constructor(readonly pick: number) {}
  check = (model: Readonly<RwModel>) => model.readers > 0 || model.writer;
  async run(model: RwModel, real: Real): Promise<void> {
    const [hold] = real.held.splice(this.pick % real.held.length, 1);
    const result = await hold.release();
    expect(result.released).toBe(true);
    if (hold.mode === 'write') model.writer = false;
    else model.readers--;
  }
  toString = () => `release #${this.pick}`;
}

describe('read-write lock against its model', () => {
  const engines: LockEngine[] = [];
  beforeAll(async () => {
    for (let i = 0; i < 2; i++) {
      // A counter per resource from 1: the model can say each token exactly.
      const engine = new LockEngine({
        nodes: redis.nodes.map((n) => n.url),
        logger: quietLogger(),
        fenceCounter: 'resource',
        fenceCounterTtl: 0,
      });
      await engine.connect();
      engines.push(engine);
    }
  });
  afterAll(async () => {
    await Promise.all(engines.map((e) => e.close()));
  });

  it('grants, refuses and numbers every step as the model does', async () => {
    const commands = [
      fc
        .tuple(fc.constantFrom<LockMode>('read', 'write'), fc.integer({ min: 0, max: 1 }))
        .map(([mode, engine]) => new TryAcquire(mode, engine)),
      fc.nat().map((pick) => new Release(pick)),
    ];
    await fc.assert(
      fc.asyncProperty(fc.commands(commands, { maxCommands: 25 }), async (cmds) => {
        const real: Real = { engines, resource: `model:${randomUUID()}`, held: [] };
        try {
          await fc.asyncModelRun(() => ({ model: new RwModel(), real }), cmds);
        } finally {
          await Promise.all(real.held.map((h) => h.release()));
        }
      }),
      { numRuns: 30 },
    );
  });
});
