/**
 * Fault scenarios for read-write locks and semaphores on five real nodes:
 * holders that stop (no extension, no release: a paused process), nodes
 * paused (slow) and killed then restarted from their AOF, while engines
 * contend; the history goes to checkShared(). Then the negative controls
 * the checker must catch: readers counted on one node only, and a semaphore
 * counted per node, where each grant missed one node.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { LockEngine } from '../../lib/engine/index.js';
import { readWriteLock, semaphore } from '../../lib/engine/lease-parts.js';
import type { Lock } from '../../lib/engine/lock.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';
import { nodesBack } from '../support/engine-ready.js';
import { quietLogger } from '../support/quiet-logger.js';
import { checkShared, type Holding } from './shared-checker.js';

const redis = useRedisNodes(5, { extraArgs: ['--maxmemory-policy', 'noeviction'] });
const TTL = 300;
const PERMITS = 2;

describe('read-write locks and semaphores under faults', () => {
  const engines: LockEngine[] = [];
  const engine = async (nodes = redis.nodes) => {
    const created = new LockEngine({
      nodes: nodes.map((n) => n.url),
      logger: quietLogger(),
      ttl: TTL,
      fenceCounter: 'resource',
      fenceCounterTtl: 0,
      checkNodes: false,
    });
    await created.connect();
    engines.push(created);
    return created;
  };
  beforeAll(async () => {
    for (let i = 0; i < 3; i++) await engine();
  });
  afterAll(async () => {
    await Promise.all(engines.map((e) => e.close()));
  });

  it('no writer overlaps another holder, never more than N valid permits, tokens as stated', async () => {
    const resource = `rw:${randomUUID()}`;
    const sem = `sem:${randomUUID()}`;
    const holdings: Holding[] = [];
    let acquired = 0;
    let failed = 0;
    let stop = false;
    let seed = 7;
    // A fixed sequence of choices (a linear congruential generator): each run makes the same.
    const random = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;

    const record = (lock: Lock, holder: string, asked: number, granted: number, end: number) => {
      const kind = 'mode' in lock ? (lock.mode as 'read' | 'write') : 'permit';
      holdings.push({
        holder,
        resource: kind === 'permit' ? sem : resource,
        kind,
        asked,
        granted,
        end: Math.min(end, lock.validUntil),
        token: lock.token!,
        slot: 'slot' in lock ? (lock.slot as number) : undefined,
        permits: kind === 'permit' ? PERMITS : undefined,
      });
    };

    const worker = async (w: number) => {
      const e = engines[w % engines.length];
      for (let op = 0; !stop; op++) {
        const roll = random();
        const hold = random() * 40;
        const paused = random() < 1 / 6;
        const holder = `w${w}#${op}`;
        const asked = performance.now();
        const take = (): Promise<Lock> =>
          roll < 0.4
            ? readWriteLock(e, resource).acquire('read', { waitTimeout: 1500 })
            : roll < 0.65
              ? readWriteLock(e, resource).acquire('write', { waitTimeout: 1500 })
              : semaphore(e, sem, PERMITS).acquire({ waitTimeout: 1500 });
        try {
          const lock = await take();
          acquired++;
          const granted = performance.now();
          if (paused) {
            // A holder that stops: no extension, no release; the others go on once its lease ends.
            await sleep(TTL + 50);
            record(lock, holder, asked, granted, performance.now());
            continue;
          }
          // Extended while held, as using() does; some holds outlive the lease.
          const extending = setInterval(() => lock.extend().catch(() => undefined), TTL / 3);
          await sleep(random() < 0.1 ? TTL * 1.5 : hold);
          clearInterval(extending);
          record(lock, holder, asked, granted, performance.now());
          await lock.release();
        } catch {
          failed++;
        }
      }
    };

    const faults = async () => {
      const [n0, n1, n2, n3] = redis.nodes;
      // Slow nodes: one, then two, each stopped for a moment longer than a node timeout.
      for (let i = 0; i < 4; i++) {
        await n1.pause();
        await sleep(80);
        await n1.resume();
        await Promise.all([n2.pause(), n3.pause()]);
        await sleep(60);
        await Promise.all([n2.resume(), n3.resume()]);
        await sleep(100);
      }
      // A node killed and restarted from its AOF; then two at once.
      await n0.kill();
      await sleep(500);
      await n0.restart();
      await nodesBack(redis.nodes, ...engines);
      await Promise.all([n1.kill(), n2.kill()]);
      await sleep(400);
      await Promise.all([n1.restart(), n2.restart()]);
      await nodesBack(redis.nodes, ...engines);
      await sleep(500);
    };

    const kinds = (k: Holding['kind']) => holdings.filter((h) => h.kind === k).length;
    const enough = () => kinds('read') > 10 && kinds('write') > 5 && kinds('permit') > 10;
    const workers = Array.from({ length: 6 }, (_, w) => worker(w));
    // The faults run again until enough of each kind was held under them: a loaded machine grants
    // fewer in one pass (one full run saw 7 reads where 17 to 24 are usual).
    let passes = 0;
    while (passes === 0 || (passes < 3 && !enough())) {
      await faults();
      passes++;
    }
    stop = true;
    await Promise.all(workers);

    const violations = checkShared(holdings);
    console.log(
      `read-write and semaphore faults (${passes} pass${passes === 1 ? '' : 'es'}): ${acquired} grants (${kinds('read')} read, ${kinds('write')} write, ` +
        `${kinds('permit')} permits), ${failed} acquisitions failed or timed out, ${violations.length} violations`,
    );
    expect(violations).toEqual([]);
    expect(kinds('read')).toBeGreaterThan(10);
    expect(kinds('write')).toBeGreaterThan(5);
    expect(kinds('permit')).toBeGreaterThan(10);
  }, 60_000);

  it('negative control: readers counted on one node only let a writer in beside a reader', async () => {
    const resource = `one-node:${randomUUID()}`;
    const [a, b] = await Promise.all([engine([redis.nodes[0]]), engine([redis.nodes[1]])]);
    const asked = performance.now();
    const reader = await readWriteLock(a, resource).acquire('read');
    const writer = await readWriteLock(b, resource).acquire('write');
    const now = performance.now();
    const violations = checkShared([
      {
        holder: 'reader',
        resource,
        kind: 'read',
        asked,
        granted: asked,
        end: now,
        token: reader.token!,
      },
      {
        holder: 'writer',
        resource,
        kind: 'write',
        asked,
        granted: now - 1,
        end: now,
        token: writer.token!,
      },
    ]);
    expect(violations.map((v) => v.kind)).toContain('writer-overlap');
    await Promise.all([reader.release(), writer.release()]);
    // The quorum refuses that writer.
    const quorumReader = await readWriteLock(engines[0], resource).acquire('read');
    await expect(readWriteLock(engines[1], resource).tryAcquire('write')).rejects.toThrow(/held/);
    await quorumReader.release();
  });

  it('negative control: a semaphore counted per node grants three of two permits when each grant misses a node', async () => {
    // Three nodes; each grant reaches two of them (the third was down or slow for it).
    const trio = redis.nodes.slice(0, 3);
    const pairs = [
      [0, 1],
      [1, 2],
      [0, 2],
    ];
    const name = `per-node:${randomUUID()}`;
    const clients = trio.map((n) => new Redis(n.url));
    try {
      // Counting holders per node: grant while fewer than N stand there.
      const NAIVE = `if redis.call('HLEN', KEYS[1]) < tonumber(ARGV[2]) then
        redis.call('HSET', KEYS[1], ARGV[1], 1) return 1 end return 0`;
      const naive: Holding[] = [];
      const start = performance.now();
      for (const [i, pair] of pairs.entries()) {
        const replies = await Promise.all(
          pair.map((n) => clients[n].eval(NAIVE, 1, `naive:{${name}}`, `v${i}`, PERMITS)),
        );
        if (replies.every((r) => r === 1)) {
          naive.push({
            holder: `v${i}`,
            resource: name,
            kind: 'permit',
            asked: start,
            granted: performance.now(),
            end: Infinity,
            token: i + 1,
            slot: i + 1,
            permits: PERMITS,
          });
        }
      }
      expect(naive).toHaveLength(3);
      expect(checkShared(naive).map((v) => v.kind)).toContain('too-many-permits');

      // Slots: the same three grants, each on a pair of nodes; the third cannot get a slot.
      const pairEngines = await Promise.all(pairs.map((pair) => engine(pair.map((n) => trio[n]))));
      const slotted: Holding[] = [];
      const granted: Lock[] = [];
      for (const [i, e] of pairEngines.entries()) {
        try {
          // A short wait: a grant whose two nodes offer different slots asks again with a hint.
          const permit = await semaphore(e, name, PERMITS).acquire({
            waitTimeout: 300,
            ttl: 10_000,
          });
          granted.push(permit);
          slotted.push({
            holder: `p${i}`,
            resource: name,
            kind: 'permit',
            asked: start,
            granted: performance.now(),
            end: Infinity,
            token: permit.token!,
            slot: permit.slot,
            permits: PERMITS,
          });
        } catch {
          // Refused: no slot is free on both of its nodes.
        }
      }
      expect(slotted).toHaveLength(2);
      expect(checkShared(slotted)).toEqual([]);
      await Promise.all(granted.map((p) => p.release()));
    } finally {
      for (const c of clients) c.disconnect();
    }
  });
});
