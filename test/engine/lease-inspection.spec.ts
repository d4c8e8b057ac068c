import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { randomUUID } from 'node:crypto';
import { LockEngine } from '../../lib/engine/index.js';
import {
  inspectLeases,
  judgeReadWrite,
  judgeSemaphore,
  listLeases,
  type NodeLeaseHolder,
  type NodeLeaseState,
  type NodeLineWaiter,
} from '../../lib/engine/internal.js';
import { readWriteLock, semaphore } from '../../lib/engine/lease-parts.js';
import { nodesBack } from '../support/engine-ready.js';
import { nextLockEvent } from '../support/lock-events.js';
import { quietLogger } from '../support/quiet-logger.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';
import { writeLeaseEntry } from './lease-entries.js';

/** A node's answer: holders and line, or undefined holders for a node that did not answer. */
function answer(
  node: string,
  holders: NodeLeaseHolder[] | undefined,
  line: NodeLineWaiter[] = [],
  fence: number | null = null,
): NodeLeaseState {
  return holders === undefined
    ? { node, holders: undefined, line: undefined, fence: undefined, error: 'no answer' }
    : { node, holders, line, fence };
}

const reader = (value: string, lease: number, token = 1): NodeLeaseHolder => ({
  value,
  mode: 'read',
  lease,
  token,
});
const writer = (value: string, lease: number, token = 1): NodeLeaseHolder => ({
  value,
  mode: 'write',
  lease,
  token,
});
const permit = (slot: number, value: string, lease: number, token = 1): NodeLeaseHolder => ({
  value,
  slot,
  lease,
  token,
});

describe('judging read-write locks and semaphores', () => {
  it('held for writing by one: the lease is how long a quorum of its entries lasts, the token the highest', () => {
    const judged = judgeReadWrite(
      'catalogue',
      [
        answer('a', [writer('w1', 30_000, 7)], [], 7),
        answer('b', [writer('w1', 20_000, 7)], [], 9),
        answer('c', [writer('w1', 5_000, 6)], [], 6),
      ],
      2,
    );
    expect(judged).toMatchObject({
      kind: 'read-write',
      verdict: 'held',
      mode: 'write',
      present: true,
      answered: 3,
      fence: 9,
      uncertain: [],
      stale: [],
    });
    expect(judged.holders).toEqual([
      { value: 'w1', mode: 'write', nodes: 3, lease: 20_000, token: 7 },
    ]);
  });

  it("gives a holding the token a quorum of its entries record, not a node's outside that quorum", () => {
    const judged = judgeReadWrite(
      'x',
      [
        answer('a', [reader('r', 900, 5)]),
        answer('b', [reader('r', 900, 5)]),
        answer('c', [reader('r', 900, 9)]),
      ],
      2,
    );
    expect(judged.holders.map((h) => h.token)).toEqual([5]);
    // Short of a quorum that agrees, the highest.
    const split = judgeReadWrite(
      'x',
      [answer('a', [reader('r', 900, 5)]), answer('b', [reader('r', 900, 6)])],
      2,
    );
    expect(split.holders.map((h) => h.token)).toEqual([6]);
  });

  it('held for reading by three; an entry on one node only is stale, not a holder', () => {
    const readers = (lease: number) => [
      reader('r3', lease),
      reader('r1', lease),
      reader('r2', lease),
    ];
    const judged = judgeReadWrite(
      'catalogue',
      [
        answer('a', [...readers(9000), reader('gone', 100)]),
        answer('b', readers(8000)),
        answer('c', readers(7000)),
      ],
      2,
    );
    expect(judged.verdict).toBe('held');
    expect(judged.mode).toBe('read');
    expect(judged.holders.map((h) => [h.value, h.nodes, h.lease])).toEqual([
      ['r1', 3, 8000],
      ['r2', 3, 8000],
      ['r3', 3, 8000],
    ]);
    expect(judged.stale).toEqual([{ value: 'gone', mode: 'read', nodes: 1, lease: 100, token: 1 }]);
  });

  it('free when no holding can have a quorum, counting the nodes that did not answer', () => {
    const free = judgeReadWrite(
      'x',
      [answer('a', [reader('r', 500)]), answer('b', []), answer('c', undefined)],
      2,
    );
    // One node with the entry and one silent node could still make a quorum: unknown.
    expect(free.verdict).toBe('unknown');
    expect(free.uncertain.map((h) => h.value)).toEqual(['r']);

    const stale = judgeReadWrite(
      'x',
      [answer('a', [reader('r', 500)]), answer('b', []), answer('c', [])],
      2,
    );
    expect(stale).toMatchObject({ verdict: 'free', present: true, holders: [], uncertain: [] });
    expect(stale.stale.map((h) => h.value)).toEqual(['r']);

    const empty = judgeReadWrite(
      'x',
      [answer('a', []), answer('b', []), answer('c', undefined)],
      2,
    );
    expect(empty).toMatchObject({ verdict: 'free', present: false, answered: 2, fence: undefined });
  });

  it('unknown when too few nodes answered to tell, even with nothing seen', () => {
    const judged = judgeReadWrite(
      'x',
      [answer('a', []), answer('b', undefined), answer('c', undefined)],
      2,
    );
    expect(judged).toMatchObject({ verdict: 'unknown', present: false, answered: 1 });
  });

  it('held by those on a quorum, with the ones the silent nodes could complete apart', () => {
    const judged = judgeReadWrite(
      'x',
      [
        answer('a', [reader('r1', 900), reader('r2', 900)]),
        answer('b', [reader('r1', 800)]),
        answer('c', undefined),
      ],
      2,
    );
    expect(judged.verdict).toBe('held');
    expect(judged.holders.map((h) => h.value)).toEqual(['r1']);
    expect(judged.uncertain.map((h) => h.value)).toEqual(['r2']);
  });

  it('puts the waiters of every node in one line, first come first, ties by id', () => {
    const place = (
      waiter: string,
      arrival: number,
      mode: 'read' | 'write',
      waited: number,
      left: number,
    ) => ({
      waiter,
      arrival,
      mode,
      waited,
      place: left,
    });
    const judged = judgeReadWrite(
      'x',
      [
        answer('a', [], [place('b', 100, 'read', 50, 700), place('w', 200, 'write', 40, 600)]),
        answer('b', [], [place('a', 100, 'read', 52, 800), place('b', 100, 'read', 51, 750)]),
        answer('c', [], []),
      ],
      2,
    );
    expect(judged).toMatchObject({ verdict: 'free', present: true });
    expect(judged.line).toEqual([
      { waiter: 'a', arrival: 100, mode: 'read', nodes: 1, waited: 52, place: 800 },
      { waiter: 'b', arrival: 100, mode: 'read', nodes: 2, waited: 51, place: 750 },
      { waiter: 'w', arrival: 200, mode: 'write', nodes: 1, waited: 40, place: 600 },
    ]);
  });

  it("counts a semaphore's permits by slot and value, and keeps the N it is given", () => {
    const judged = judgeSemaphore(
      'payments',
      [
        answer('a', [permit(1, 'p', 900, 4), permit(2, 'q', 800, 5)], [], 5),
        answer('b', [permit(1, 'p', 950, 4), permit(3, 'q', 800, 6)], [], 6),
        answer('c', [permit(2, 'q', 700, 5), permit(1, 'p', 990, 4)], [], 5),
      ],
      2,
      4,
    );
    expect(judged).toMatchObject({ kind: 'semaphore', verdict: 'held', permits: 4, fence: 6 });
    // q holds slot 2 on a quorum; its slot 3 on one node is what a split vote left behind.
    expect(judged.holders).toEqual([
      { value: 'p', slot: 1, nodes: 3, lease: 950, token: 4 },
      { value: 'q', slot: 2, nodes: 2, lease: 700, token: 5 },
    ]);
    expect(judged.stale).toEqual([{ value: 'q', slot: 3, nodes: 1, lease: 800, token: 6 }]);
    expect(judgeSemaphore('payments', [answer('a', [])], 1).permits).toBeUndefined();
  });
});

describe('reading read-write locks and semaphores off the nodes', () => {
  const redis = useRedisNodes(3);
  const unique = (name: string) => `${name}:${randomUUID()}`;
  const SLOW_POLLING = { delay: 3000, factor: 1, maxDelay: 3000, jitter: 0 };
  let engine: LockEngine;
  let waiting: LockEngine;
  const inspect = (name: string, permits?: number) =>
    inspectLeases(engine.nodes, 'lock:', name, engine.quorum, 2000, permits);
  const writeEntry = (key: string, field: string, entry: (expiry: number) => string, ms: number) =>
    writeLeaseEntry(
      redis.nodes.map((n) => n.url),
      key,
      field,
      entry,
      ms,
    );

  beforeAll(async () => {
    engine = new LockEngine({ nodes: redis.nodes.map((n) => n.url), logger: quietLogger() });
    waiting = new LockEngine({ nodes: redis.nodes.map((n) => n.url), logger: quietLogger() });
    await Promise.all([engine.connect(), waiting.connect()]);
  });
  afterAll(async () => {
    await Promise.all([engine.close({ timeout: 0 }), waiting.close({ timeout: 0 })]);
  });
  afterEach(async () => {
    await nodesBack(redis.nodes, engine);
  });

  it('shows the readers of a read-write lock and the writer waiting in line', async () => {
    const name = unique('catalogue');
    const readers = await Promise.all(
      [1, 2].map(() => readWriteLock(engine, name).acquire('read', { ttl: 60_000 })),
    );
    // The second refusal is the attempt that took a place in line.
    const inLine = nextLockEvent(waiting, 'contended', name, 2);
    const writing = readWriteLock(waiting, name).acquire('write', {
      retry: SLOW_POLLING,
      waitTimeout: 20_000,
    });
    await inLine;
    const { readWrite, semaphore: sem } = await inspect(name);
    expect(sem.present).toBe(false);
    expect(readWrite).toMatchObject({ verdict: 'held', mode: 'read', present: true, answered: 3 });
    // Readers that ask at once may get different tokens: each takes the counters as they stand.
    const byValue = (list: readonly { value: string; token?: number }[]) =>
      list.map((h) => [h.value, h.token]).sort((a, b) => String(a[0]).localeCompare(String(b[0])));
    expect(byValue(readWrite.holders)).toEqual(byValue(readers));
    for (const holding of readWrite.holders) {
      expect(holding.nodes).toBeGreaterThanOrEqual(2);
      expect(holding.lease).toBeGreaterThan(50_000);
    }
    expect(readWrite.line).toHaveLength(1);
    expect(readWrite.line[0]).toMatchObject({ mode: 'write' });
    expect(readWrite.line[0].nodes).toBeGreaterThanOrEqual(2);
    expect(readWrite.line[0].place).toBeGreaterThan(0);
    await Promise.all(readers.map((r) => r.release()));
    const write = await writing;
    const after = await inspect(name);
    expect(after.readWrite).toMatchObject({ verdict: 'held', mode: 'write' });
    expect(after.readWrite.holders.map((h) => [h.value, h.token])).toEqual([
      [write.value, write.token],
    ]);
    // Nobody waits on a quorum any more. The writer's own place may linger on a node that did
    // not grant it: the grant is decided on a quorum, and leaving the other lines is not awaited
    // (the place there lapses with its lease).
    expect(after.readWrite.line.filter((waiter) => waiter.nodes >= 2)).toEqual([]);
    expect(after.readWrite.line.length).toBeLessThanOrEqual(1);
    await write.release();
  });

  it("shows a semaphore's permits by slot, N when given, and its line", async () => {
    const name = unique('payments');
    const permits = await Promise.all([1, 2].map(() => semaphore(engine, name, 2).acquire()));
    const inLine = nextLockEvent(waiting, 'contended', name, 2);
    const queued = semaphore(waiting, name, 2).acquire({
      retry: SLOW_POLLING,
      waitTimeout: 20_000,
    });
    await inLine;
    const { semaphore: sem, readWrite } = await inspect(name, 2);
    expect(readWrite.present).toBe(false);
    expect(sem).toMatchObject({ verdict: 'held', permits: 2, present: true });
    expect(sem.holders.map((h) => [h.slot, h.value])).toEqual(
      permits.map((p) => [p.slot, p.value]).sort((a, b) => Number(a[0]) - Number(b[0])),
    );
    expect(sem.line).toHaveLength(1);
    expect(sem.line[0].mode).toBeUndefined();
    await permits[0].release();
    const third = await queued;
    await Promise.all([permits[1].release(), third.release()]);
    const free = await inspect(name);
    expect(free.semaphore).toMatchObject({ verdict: 'free', holders: [] });
    // Nobody waits on a quorum. The third's own place may linger on a node that did not grant
    // it (leaving the lines is not awaited, and the place lapses with its lease), and a release
    // still on its way to the last node leaves a stale entry there: then, and only then, the
    // semaphore's keys are still there.
    expect(free.semaphore.line.filter((waiter) => waiter.nodes >= 2)).toEqual([]);
    expect(free.semaphore.present).toBe(
      free.semaphore.line.length + free.semaphore.stale.length > 0,
    );
  });

  it('ReadWriteLock.inspect() and Semaphore.inspect() read their own name, the semaphore with its N', async () => {
    const name = unique('own');
    const rw = readWriteLock(engine, name);
    const sem = semaphore(engine, name, 3);
    const write = await rw.acquire('write');
    expect(await rw.inspect()).toMatchObject({
      kind: 'read-write',
      resource: name,
      verdict: 'held',
      mode: 'write',
    });
    expect(await sem.inspect()).toMatchObject({
      kind: 'semaphore',
      resource: name,
      verdict: 'free',
      permits: 3,
      present: false,
    });
    const permit = await sem.acquire();
    expect((await sem.inspect()).holders.map((h) => [h.slot, h.value])).toEqual([
      [permit.slot, permit.value],
    ]);
    await Promise.all([write.release(), permit.release()]);
    expect(await rw.inspect()).toMatchObject({ verdict: 'free', holders: [] });
  });

  it('leaves out entries past their expiry, as the scripts do', async () => {
    const name = unique('expired');
    await writeEntry(`lock:{${name}}:rw`, 'ghost', (expiry) => `r ${expiry} 5`, -1000);
    await writeEntry(`lock:{${name}}:sem`, '1', (expiry) => `ghost ${expiry} 5`, -1000);
    await writeEntry(`lock:{${name}}:sem:q`, 'waiter', (expiry) => `100 ${expiry}`, -1000);
    const expired = await inspect(name);
    expect(expired.readWrite).toMatchObject({
      verdict: 'free',
      present: false,
      holders: [],
      stale: [],
    });
    expect(expired.semaphore).toMatchObject({ verdict: 'free', present: false, line: [] });
    expect(expired.readWrite.nodes.map((n) => n.holders)).toEqual([[], [], []]);

    // Beside a live entry, only the live one shows.
    await writeEntry(`lock:{${name}}:rw`, 'alive', (expiry) => `w ${expiry} 6`, 60_000);
    const live = await inspect(name);
    expect(live.readWrite.holders.map((h) => [h.value, h.mode, h.token])).toEqual([
      ['alive', 'write', 6],
    ]);
    expect(
      (await listLeases(engine.nodes, 'lock:', name, engine.quorum, 2000)).readWrite.map(
        (i) => i.resource,
      ),
    ).toEqual([name]);
  });

  it('says unknown while too few nodes answer, and names the nodes that did not', async () => {
    const name = unique('down');
    const hold = await readWriteLock(engine, name).acquire('write', { ttl: 60_000 });
    await Promise.all([redis.nodes[1].kill(), redis.nodes[2].kill()]);
    const { readWrite } = await inspect(name);
    expect(readWrite).toMatchObject({ verdict: 'unknown', answered: 1, holders: [] });
    expect(readWrite.uncertain.map((h) => h.value)).toEqual([hold.value]);
    expect(readWrite.nodes[1]).toMatchObject({ holders: undefined, line: undefined });
    expect(readWrite.nodes[1].error).toEqual(expect.any(String));
  });

  it('lists the read-write locks and semaphores held among the names matching a pattern, up to a limit', async () => {
    const tag = randomUUID();
    const hold = await readWriteLock(engine, `${tag}:a`).acquire('read');
    const permit = await semaphore(engine, `${tag}:b`, 3).acquire();
    const both = await Promise.all([
      readWriteLock(engine, `${tag}:c`).acquire('write'),
      semaphore(engine, `${tag}:c`, 1).acquire(),
    ]);
    const other = await semaphore(engine, `${randomUUID()}:b`, 1).acquire();
    // A name whose entries all expired is no longer held.
    await writeEntry(`lock:{${tag}:d}:rw`, 'ghost', (expiry) => `r ${expiry} 5`, -1000);
    const listing = await listLeases(engine.nodes, 'lock:', `${tag}:*`, engine.quorum, 2000);
    expect(listing.readWrite.map((i) => [i.resource, i.mode])).toEqual([
      [`${tag}:a`, 'read'],
      [`${tag}:c`, 'write'],
    ]);
    expect(listing.semaphores.map((i) => [i.resource, i.holders.length])).toEqual([
      [`${tag}:b`, 1],
      [`${tag}:c`, 1],
    ]);
    expect(listing.limitReached).toBe(false);

    const limited = await listLeases(engine.nodes, 'lock:', `${tag}:*`, engine.quorum, 2000, 2);
    expect(limited.limitReached).toBe(true);
    expect(
      [...limited.readWrite, ...limited.semaphores].map((i) => `${i.resource} ${i.kind}`).sort(),
    ).toEqual([`${tag}:a read-write`, `${tag}:b semaphore`]);
    await Promise.all([hold, permit, ...both, other].map((lock) => lock.release()));
  });
});
