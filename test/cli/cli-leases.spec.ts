/**
 * The command line on read-write locks and semaphores: `inspect` shows each
 * kind a name has, `list` marks them by kind. Run through `runCli()`
 * (cli-process.ts) against real redis-server nodes, with holders and waiters
 * from LockEngines standing in for the app.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { randomUUID } from 'node:crypto';
import { LockEngine, type RetryOptions } from '../../lib/engine/index.js';
import { readWriteLock, semaphore } from '../../lib/engine/lease-parts.js';
import { writeLeaseEntry } from '../engine/lease-entries.js';
import { nodesBack } from '../support/engine-ready.js';
import { nextLockEvent } from '../support/lock-events.js';
import { quietLogger } from '../support/quiet-logger.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';
import { cli, columnsOf, json, literal } from './cli-process.js';

const unique = (name: string) => `${name}:${randomUUID()}`;
/** A waiter that asks again only when woken, so that it stays in line while the tool reads. */
const SLOW_POLLING: RetryOptions = { delay: 3000, factor: 1, maxDelay: 3000, jitter: 0 };
const LEASE = /^5\d\.\d s$/;

describe('the command line on read-write locks and semaphores', () => {
  const redis = useRedisNodes(3);
  const urls = () => redis.nodes.map((n) => n.url);
  const label = (i: number) => `${redis.nodes[i].host}:${redis.nodes[i].port}`;
  const nodes = () => ['--nodes', urls().join(',')];
  let app: LockEngine;
  /** Another instance of the app, whose waiters line up behind `app`'s holders. */
  let other: LockEngine;

  beforeAll(async () => {
    app = new LockEngine({ nodes: urls(), logger: quietLogger() });
    other = new LockEngine({ nodes: urls(), logger: quietLogger() });
    await Promise.all([app.connect(), other.connect()]);
  });
  afterAll(async () => {
    await Promise.all([app.close(), other.close()]);
  });
  afterEach(async () => {
    await nodesBack(redis.nodes, app);
  });

  it("inspect shows a read-write lock's readers on every node and the writer waiting in line", async () => {
    const name = unique('catalogue');
    const readers = await Promise.all(
      [1, 2].map(() => readWriteLock(app, name).acquire('read', { ttl: 60_000 })),
    );
    // The writer's second refusal is the attempt that took its place in line.
    const inLine = nextLockEvent(other, 'contended', name, 2);
    const writing = readWriteLock(other, name).acquire('write', {
      retry: SLOW_POLLING,
      waitTimeout: 25_000,
    });
    await inLine;
    const result = await cli(['inspect', name, ...nodes()]);
    expect(result).toMatchObject({ code: 0, stderr: '' });
    const lines = result.stdout.trimEnd().split('\n');
    // No lock key on any node: only the read-write lock's section.
    expect(lines[0]).toMatch(
      new RegExp(
        `^Read-write lock ${literal(name)}: held for reading by 2 \\(each on 3 of 3 nodes, quorum 2\\); ` +
          `the first lease ends in 5\\d\\.\\d s; 1 waiter in line; last fencing token \\d+\\.$`,
      ),
    );
    expect(lines[1]).toBe('');
    expect(lines[2].split(/\s+/)).toEqual(['NODE', 'HOLDER', 'MODE', 'LEASE', 'TOKEN']);
    const values = readers.map((r) => r.value).sort();
    const holderRows = lines.slice(3, 9).map((line) => line.trim().split(/\s{2,}/));
    holderRows.forEach((cells, k) => {
      // Each node on the first of its rows, then its other holders.
      const lead = k % 2 === 0 ? [label(k / 2)] : [];
      expect(cells).toEqual([
        ...lead,
        values[k % 2],
        'read',
        expect.stringMatching(LEASE),
        expect.stringMatching(/^\d+$/),
      ]);
    });
    // A node's entry records the token that node gave; a quorum of them, the reader's own.
    for (const reader of readers) {
      const rows = holderRows.filter((cells) => cells.at(-4) === reader.value);
      expect(
        rows.filter((cells) => cells.at(-1) === String(reader.token)).length,
      ).toBeGreaterThanOrEqual(2);
    }
    expect(new Set(columnsOf(lines.slice(3, 9).join('\n'), 'read'))).toEqual(
      new Set([lines[2].indexOf('MODE')]),
    );
    expect(lines[9]).toBe('');
    expect(lines[10].split(/\s+/)).toEqual(['NODE', 'WAITER', 'MODE', 'WAITED', 'PLACE']);
    const lineRows = lines.slice(11).map((line) => line.split(/\s{2,}/));
    expect(lineRows.map((cells) => [cells[0], cells[2]])).toEqual(
      [0, 1, 2].map((i) => [label(i), 'write']),
    );
    // The same waiter on every node.
    expect(new Set(lineRows.map((cells) => cells[1])).size).toBe(1);
    await Promise.all(readers.map((r) => r.release()));
    await (await writing).release();
  });

  it('inspect gives every kind a name has its own section, and --json each of them', async () => {
    const name = unique('payments');
    const lock = await app.acquire(name, { ttl: 60_000 });
    const write = await readWriteLock(app, name).acquire('write', { ttl: 60_000 });
    const permits = await Promise.all(
      [1, 2].map(() => semaphore(app, name, 3).acquire({ ttl: 60_000 })),
    );
    permits.sort((a, b) => a.slot - b.slot);
    const last = Math.max(...permits.map((p) => p.token!));

    const text = await cli(['inspect', name, '--permits', '3', ...nodes()]);
    expect(text.code).toBe(0);
    const sentences = text.stdout.split('\n').filter((line) => line.includes(name));
    expect(sentences).toEqual([
      expect.stringMatching(new RegExp(`^${literal(name)} is held by ${literal(lock.value)} on 3`)),
      expect.stringMatching(
        new RegExp(
          `^Read-write lock ${literal(name)}: held for writing by 1 \\(on 3 of 3 nodes, quorum 2\\); ` +
            `lease ends in 5\\d\\.\\d s; no one waits; last fencing token \\d+\\.$`,
        ),
      ),
      expect.stringMatching(
        new RegExp(
          `^Semaphore ${literal(name)}: 2 of 3 permits held \\(each on 3 of 3 nodes, quorum 2\\); ` +
            `the first lease ends in 5\\d\\.\\d s; no one waits; last fencing token \\d+\\.$`,
        ),
      ),
    ]);
    const semaphoreTable = text.stdout.split('\n\n')[5].split('\n');
    expect(semaphoreTable[0].split(/\s{2,}/)).toEqual([
      'NODE',
      'IN USE',
      'SLOT',
      'HOLDER',
      'LEASE',
      'TOKEN',
    ]);
    expect(semaphoreTable.slice(1, 3).map((line) => line.trim().split(/\s{2,}/))).toEqual([
      [
        label(0),
        '2/3',
        String(permits[0].slot),
        permits[0].value,
        expect.stringMatching(LEASE),
        expect.stringMatching(/^\d+$/),
      ],
      [
        String(permits[1].slot),
        permits[1].value,
        expect.stringMatching(LEASE),
        expect.stringMatching(/^\d+$/),
      ],
    ]);

    const result = await cli(['inspect', name, '--json', '--permits', '3', ...nodes()]);
    expect(result.code).toBe(0);
    const report = json(result);
    // The lock's facts stay where they were.
    expect(report).toMatchObject({ resource: name, verdict: 'held', holder: lock.value });
    const lease = expect.any(Number);
    // Each node's entry records the token that node gave; the holding, the one its holder has.
    const token = expect.any(Number);
    const fence = expect.any(Number);
    expect(report.readWrite).toEqual({
      kind: 'read-write',
      resource: name,
      verdict: 'held',
      mode: 'write',
      holders: [{ value: write.value, mode: 'write', nodes: 3, lease, token: write.token }],
      uncertain: [],
      stale: [],
      waiting: 0,
      line: [],
      lease,
      fence,
      quorum: { required: 2, nodes: 3, answered: 3 },
      nodes: [0, 1, 2].map((i) => ({
        node: label(i),
        answered: true,
        holders: [{ value: write.value, mode: 'write', lease, token }],
        line: [],
        fence,
        error: null,
      })),
    });
    expect(report.semaphore).toMatchObject({
      kind: 'semaphore',
      verdict: 'held',
      permits: 3,
      inUse: 2,
      holders: permits.map((p) => ({
        slot: p.slot,
        value: p.value,
        nodes: 3,
        lease,
        token: p.token,
      })),
      nodes: [0, 1, 2].map((i) => ({
        node: label(i),
        answered: true,
        holders: permits.map((p) => ({ slot: p.slot, value: p.value, lease, token })),
      })),
    });
    // The last token issued for the name: the permits came last.
    expect((report.semaphore as { fence: number }).fence).toBeGreaterThanOrEqual(last);
    await Promise.all([lock, write, ...permits].map((held) => held.release()));
  });

  it('does not show entries past their expiry: a name with only those has no section of its kind', async () => {
    const name = unique('expired');
    const write = (suffix: string, field: string, entry: (expiry: number) => string) =>
      writeLeaseEntry(urls(), `lock:{${name}}:${suffix}`, field, entry, -1000);
    await write('rw', 'crashed-reader', (expiry) => `r ${expiry} 5`);
    await write('rw:q', 'gone-waiter', (expiry) => `100 ${expiry} w`);
    await write('sem', '1', (expiry) => `crashed-permit ${expiry} 5`);
    const text = await cli(['inspect', name, ...nodes()]);
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(
      new RegExp(`^${literal(name)} is free \\(3 of 3 nodes answered\\)`),
    );
    expect(text.stdout).not.toContain('crashed');
    expect(text.stdout).not.toMatch(/Read-write lock|Semaphore/);
    const result = await cli(['inspect', name, '--json', ...nodes()]);
    expect(json(result)).toMatchObject({ verdict: 'free', readWrite: null, semaphore: null });
    const listed = await cli(['list', name, ...nodes()]);
    expect(listed.stdout).toBe(`No locks match '${name}'.\n`);
  });

  it('list marks each entry by kind, and --json lists the read-write locks and semaphores apart', async () => {
    const tag = randomUUID();
    const lock = await app.acquire(`${tag}:a`, { ttl: 60_000 });
    const read = await readWriteLock(app, `${tag}:b`).acquire('read', { ttl: 60_000 });
    const permit = await semaphore(app, `${tag}:c`, 2).acquire({ ttl: 60_000 });
    const result = await cli(['list', `${tag}:*`, ...nodes()]);
    expect(result).toMatchObject({ code: 0, stderr: '' });
    const lines = result.stdout.trimEnd().split('\n');
    expect(lines[0].split(/\s+/)).toEqual([
      'RESOURCE',
      'KIND',
      'STATE',
      'HOLDER',
      'NODES',
      'LEASE',
      'FENCE',
    ]);
    const fence = expect.stringMatching(/^\d+$/);
    expect(lines.slice(1, 4).map((line) => line.split(/\s{2,}/))).toEqual([
      [`${tag}:a`, 'lock', 'held', lock.value, '3/3', expect.stringMatching(LEASE), fence],
      [
        `${tag}:b`,
        'read-write',
        'held',
        `${read.value} (read)`,
        '3/3',
        expect.stringMatching(LEASE),
        fence,
      ],
      [`${tag}:c`, 'semaphore', 'held', '1 permit', '3/3', expect.stringMatching(LEASE), fence],
    ]);
    expect(lines.slice(4)).toEqual(['', `3 resources matching '${tag}:*'.`]);

    const report = json<{
      locks: { kind: string; resource: string }[];
      readWriteLocks: unknown[];
      semaphores: unknown[];
    }>(await cli(['list', `${tag}:*`, '--json', ...nodes()]));
    expect(report.locks.map((l) => [l.kind, l.resource])).toEqual([['lock', `${tag}:a`]]);
    const lease = expect.any(Number);
    expect(report.readWriteLocks).toEqual([
      {
        kind: 'read-write',
        resource: `${tag}:b`,
        verdict: 'held',
        mode: 'read',
        holders: [{ value: read.value, mode: 'read', nodes: 3, lease, token: read.token }],
        waiting: 0,
        lease,
        fence: expect.any(Number),
      },
    ]);
    expect(report.semaphores).toEqual([
      {
        kind: 'semaphore',
        resource: `${tag}:c`,
        verdict: 'held',
        permits: null,
        inUse: 1,
        holders: [{ slot: permit.slot, value: permit.value, nodes: 3, lease, token: permit.token }],
        waiting: 0,
        lease,
        fence: expect.any(Number),
      },
    ]);
    await Promise.all([lock, read, permit].map((held) => held.release()));
  });

  it('says unknown and exits 1 when too few nodes answer to tell who holds a read-write lock', async () => {
    const name = unique('down');
    const hold = await readWriteLock(app, name).acquire('write', { ttl: 60_000 });
    await Promise.all([redis.nodes[1].kill(), redis.nodes[2].kill()]);
    const result = await cli(['inspect', name, ...nodes()]);
    expect(result.code).toBe(1);
    expect(result.stdout).toContain(
      `Read-write lock ${name}: unknown: 1 of 3 nodes answered (1 holding there), too few to tell with a quorum of 2; no one waits`,
    );
    expect(result.stdout).toMatch(
      new RegExp(`${literal(label(1))} +\\(no answer\\) .* not connected \\(connect ECONNREFUSED`),
    );
    expect(result.stdout).toMatch(
      new RegExp(`${literal(label(0))} +${literal(hold.value)} +write .* short of a quorum`),
    );
    await hold.release().catch(() => undefined);
  });

  describe('release', () => {
    /** A waiter that would sleep 20 s before asking again: only a release's message wakes it sooner. */
    const WOKEN_ONLY: RetryOptions = { delay: 20_000, factor: 1, maxDelay: 20_000, jitter: 0 };

    it('releases one reader by --holder, then the rest, and the waiting writer is woken at once', async () => {
      const name = unique('catalogue');
      const [first, second] = await Promise.all(
        [1, 2].map(() => readWriteLock(app, name).acquire('read', { ttl: 60_000 })),
      );
      const inLine = nextLockEvent(other, 'contended', name, 2);
      const writing = readWriteLock(other, name)
        .acquire('write', { retry: WOKEN_ONLY, waitTimeout: 25_000 })
        .then((hold) => ({ hold, at: performance.now() }));
      await inLine;

      // A holder value is random base64url, so 1 in 64 starts with '-': given as a separate
      // argument, that one reads as an option (the tool says to write --holder=-...).
      const one = await cli(['release', name, `--holder=${first.value}`, '--yes', ...nodes()]);
      expect(one).toMatchObject({ code: 0, stderr: '' });
      expect(one.stdout.trimEnd().split('\n').at(-1)).toBe(
        `Released holder '${first.value}' of the read-write lock '${name}': deleted 3 entries on the nodes and woke its waiters.`,
      );
      const after = await readWriteLock(app, name).inspect();
      expect(after.holders.map((h) => h.value)).toEqual([second.value]);
      expect(after.line).toHaveLength(1);

      // Only a read-write lock has that name: no --kind needed.
      const rest = await cli(['release', name, '--yes', '--json', ...nodes()]);
      expect(rest.code).toBe(0);
      expect(json(rest)).toMatchObject({
        resource: name,
        kind: 'read-write',
        holder: null,
        released: true,
        deleted: 3,
        nodes: 3,
        before: { verdict: 'held' },
      });
      const { hold, at } = await writing;
      expect(at - rest.exitedAt).toBeLessThan(10_000);
      expect(hold.token).toBeGreaterThan(Math.max(first.token!, second.token!));
      // The released readers learn of it at their next extension; their release finds nothing.
      expect((await first.release()).released).toBe(false);
      await Promise.all([second.release(), hold.release()]);
    });

    it("releases a semaphore's permits, and its waiter is woken at once", async () => {
      const name = unique('payments');
      const permits = await Promise.all(
        [1, 2].map(() => semaphore(app, name, 2).acquire({ ttl: 60_000 })),
      );
      const inLine = nextLockEvent(other, 'contended', name, 2);
      const waiting = semaphore(other, name, 2)
        .acquire({ retry: WOKEN_ONLY, waitTimeout: 25_000 })
        .then((permit) => ({ permit, at: performance.now() }));
      await inLine;
      const result = await cli(['release', name, '--kind', 'semaphore', '--yes', ...nodes()]);
      expect(result).toMatchObject({ code: 0, stderr: '' });
      expect(result.stdout).toContain(`Semaphore ${name}: 2 permits held`);
      expect(result.stdout.trimEnd().split('\n').at(-1)).toBe(
        `Released every holder of the semaphore '${name}': deleted 6 entries on the nodes and woke its waiters.`,
      );
      const { permit, at } = await waiting;
      expect(at - result.exitedAt).toBeLessThan(10_000);
      await Promise.all([permit, ...permits].map((p) => p.release()));
    });

    it('asks for --kind when a name has several, and exits 1 for a holder it does not have', async () => {
      const name = unique('both');
      const lock = await app.acquire(name, { ttl: 60_000 });
      const permit = await semaphore(app, name, 1).acquire({ ttl: 60_000 });
      const ambiguous = await cli(['release', name, '--yes', ...nodes()]);
      expect(ambiguous).toMatchObject({ code: 2, stdout: '' });
      expect(ambiguous.stderr).toBe(
        `nestjs-redis-lock: '${name}' has a lock and a semaphore: say which to release, e.g. nestjs-redis-lock release '${name}' --kind lock\n`,
      );
      const stranger = await cli([
        'release',
        name,
        '--kind',
        'semaphore',
        '--holder',
        'nobody',
        '--yes',
        ...nodes(),
      ]);
      expect(stranger).toMatchObject({ code: 1, stdout: '' });
      expect(stranger.stderr).toContain(
        `no node that answered has a holder 'nobody' of the semaphore '${name}': nothing to release.`,
      );
      const none = await cli(['release', name, '--kind', 'read-write', '--yes', ...nodes()]);
      expect(none).toMatchObject({ code: 1, stdout: '' });
      expect(none.stderr).toContain(
        `'${name}' has no read-write lock held on any node that answered: nothing to release.`,
      );
      // Nothing was released by the refusals.
      expect((await app.inspect(name)).holder).toBe(lock.value);
      expect((await semaphore(app, name, 1).inspect()).holders).toHaveLength(1);
      await Promise.all([lock.release(), permit.release()]);
    });
  });
});
