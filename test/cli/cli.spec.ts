/**
 * The `nestjs-redis-lock` command line against real redis-server nodes, with
 * locks taken by a LockEngine standing in for the app: run in this process
 * through `runCli()` (cli-process.ts), and as a user runs it, a separate
 * `node` process, where a spec is about the process itself: its exit codes
 * (0, 1, 2), a stdin that is not a terminal, and that it ends on its own
 * once a command against the nodes is done.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { PassThrough } from 'node:stream';
import { LockEngine } from '../../lib/engine/index.js';
import { runCli } from '../../lib/cli/lock-cli.js';
import { engineReady, nodesBack } from '../support/engine-ready.js';
import { nextLockEvent } from '../support/lock-events.js';
import { quietLogger } from '../support/quiet-logger.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';
import { cli, cliProcess, columnsOf, json, literal, ROOT, type CliResult } from './cli-process.js';

const VERSION = (JSON.parse(readFileSync(`${ROOT}/package.json`, 'utf8')) as { version: string })
  .version;
const unique = (name: string) => `${name}:${randomUUID()}`;

describe('the nestjs-redis-lock command line', () => {
  const redis = useRedisNodes(3);
  const urls = () => redis.nodes.map((n) => n.url);
  const label = (i: number) => `${redis.nodes[i].host}:${redis.nodes[i].port}`;
  const nodes = () => ['--nodes', urls().join(',')];
  let app: LockEngine;

  beforeAll(async () => {
    app = new LockEngine({ nodes: urls(), logger: quietLogger() });
    await app.connect();
  });
  afterAll(() => app.close({ timeout: 0 }));
  afterEach(async () => {
    await nodesBack(redis.nodes, app);
  });

  describe('inspect', () => {
    it('shows the holder, the lease and the fence counter on every node, and that a quorum holds it', async () => {
      const resource = unique('order');
      const lock = await app.acquire(resource, { ttl: 60_000 });
      const result = await cliProcess(['inspect', resource, ...nodes()]);
      expect(result.code).toBe(0);
      expect(result.stderr).toBe('');
      const [verdict, blank, header, ...rows] = result.stdout.trimEnd().split('\n');
      expect(verdict).toMatch(
        new RegExp(
          `^${literal(resource)} is held by ${literal(lock.value)} on 3 of 3 nodes \\(quorum 2\\); ` +
            `lease ends in 5\\d\\.\\d s; last fencing token ${lock.token}\\.$`,
        ),
      );
      expect(blank).toBe('');
      expect(header.split(/\s+/)).toEqual(['NODE', 'HOLDER', 'LEASE', 'FENCE']);
      expect(rows).toHaveLength(3);
      rows.forEach((row, i) => {
        expect(row.split(/\s{2,}/)).toEqual([
          label(i),
          lock.value,
          expect.stringMatching(/^5\d\.\d s$/),
          String(lock.token),
        ]);
      });
      // Aligned: every value starts in its header's column; no colour through a pipe.
      expect(new Set(columnsOf(rows.join('\n'), lock.value))).toEqual(
        new Set([header.indexOf('HOLDER')]),
      );
      expect(result.stdout).not.toContain('\u001b[');
      await lock.release();
    });

    it('--json gives the same facts for machines, with lease and fence per node', async () => {
      const resource = unique('order');
      const lock = await app.acquire(resource, { ttl: 60_000 });
      const result = await cli(['inspect', resource, '--json', ...nodes()]);
      expect(result.code).toBe(0);
      const report = json(result);
      expect(report).toMatchObject({
        resource,
        verdict: 'held',
        held: true,
        holder: lock.value,
        fence: lock.token,
        quorum: { required: 2, nodes: 3, answered: 3, holding: 3 },
      });
      expect(report.lease).toBeGreaterThan(50_000);
      expect(report.nodes).toEqual(
        [0, 1, 2].map((i) => ({
          node: label(i),
          answered: true,
          holder: lock.value,
          lease: expect.any(Number),
          fence: lock.token,
          error: null,
        })),
      );
      await lock.release();
    });

    it('calls a released lock free and still shows the last token issued', async () => {
      const resource = unique('order');
      const lock = await app.acquire(resource);
      await lock.release();
      const result = await cli(['inspect', resource, '--json', ...nodes()]);
      expect(result.code).toBe(0);
      expect(json(result)).toMatchObject({
        verdict: 'free',
        held: false,
        holder: null,
        lease: null,
        fence: lock.token,
      });
    });

    it('says unknown and exits 1 when too few nodes answer to tell', async () => {
      const resource = unique('order');
      const lock = await app.acquire(resource, { ttl: 60_000 });
      await Promise.all([redis.nodes[1].kill(), redis.nodes[2].kill()]);
      const result = await cliProcess(['inspect', resource, ...nodes()]);
      expect(result.code).toBe(1);
      expect(result.stdout).toContain(
        `${resource} is unknown: 1 of 3 nodes answered (1 with a lock key), too few to tell with a quorum of 2`,
      );
      expect(result.stdout).toMatch(
        new RegExp(
          `${literal(label(2))} +\\(no answer\\) .* not connected \\(connect ECONNREFUSED`,
        ),
      );
      await lock.release();
    });
  });

  describe('list', () => {
    it('lists the locks whose resource matches the pattern, each with its state, holder and token', async () => {
      const tag = randomUUID();
      const orders = await Promise.all(
        ['1', '2'].map((id) => app.acquire(`${tag}:order:${id}`, { ttl: 60_000 })),
      );
      const user = await app.acquire(`${tag}:user:1`, { ttl: 60_000 });
      const result = await cli(['list', `${tag}:order:*`, ...nodes()]);
      expect(result.code).toBe(0);
      const lines = result.stdout.trimEnd().split('\n');
      expect(lines[0].split(/\s+/)).toEqual([
        'RESOURCE',
        'STATE',
        'HOLDER',
        'NODES',
        'LEASE',
        'FENCE',
      ]);
      expect(lines.slice(1, 3).map((line) => line.split(/\s{2,}/))).toEqual(
        orders.map((lock) => [
          lock.resources[0],
          'held',
          lock.value,
          '3/3',
          expect.stringMatching(/ s$/),
          // One counter per node (the default): the last token the nodes issued, here the user's.
          String(user.token),
        ]),
      );
      expect(lines.slice(3)).toEqual(['', `2 resources matching '${tag}:order:*'.`]);
      expect(result.stdout).not.toContain('user:1');
      await Promise.all([...orders, user].map((lock) => lock.release()));
    });

    it('stops at --limit and says so in --json', async () => {
      const tag = randomUUID();
      const locks = await Promise.all(
        ['a', 'b', 'c'].map((id) => app.acquire(`${tag}:${id}`, { ttl: 60_000 })),
      );
      const result = await cli(['list', `${tag}:*`, '--limit', '2', '--json', ...nodes()]);
      expect(result.code).toBe(0);
      const report = json<{
        limitReached: boolean;
        locks: { resource: string; verdict: string }[];
      }>(result);
      expect(report.limitReached).toBe(true);
      expect(report.locks).toHaveLength(2);
      expect(report.locks.every((l) => l.resource.startsWith(tag) && l.verdict === 'held')).toBe(
        true,
      );
      await Promise.all(locks.map((lock) => lock.release()));
    });

    it('prints that nothing matches, and exits 0', async () => {
      const result = await cli(['list', `${randomUUID()}:*`, ...nodes()]);
      expect(result).toMatchObject({ code: 0, stderr: '' });
      expect(result.stdout).toMatch(/^No locks match '.+:\*'\.\n$/);
    });
  });

  describe('release', () => {
    it('--yes force-releases a stuck lock, and an engine waiting for it gets it at once', async () => {
      const resource = unique('stuck');
      const stuck = await app.acquire(resource, { ttl: 60_000 });
      const waiter = new LockEngine({ nodes: urls(), logger: quietLogger() });
      await waiter.connect();
      try {
        const contended = nextLockEvent(waiter, 'contended', resource);
        // Without the release message it would sleep 20 s before asking again.
        const waiting = waiter.acquire(resource, {
          waitTimeout: 25_000,
          retry: { delay: 20_000, factor: 1, maxDelay: 20_000, jitter: 0 },
        });
        const granted = waiting.then((lock) => ({ lock, at: performance.now() }));
        await contended;
        const result = await cli(['release', resource, '--yes', ...nodes()]);
        expect(result.code).toBe(0);
        expect(result.stdout).toContain(`${resource} is held by ${stuck.value} on 3 of 3 nodes`);
        expect(result.stdout.trimEnd().split('\n').at(-1)).toBe(
          `Released '${resource}': deleted its key on 3 of 3 nodes and woke its waiters.`,
        );
        const next = await granted;
        expect(next.lock.token).toBeGreaterThan(stuck.token!);
        expect(next.at - result.exitedAt).toBeLessThan(10_000);
        await next.lock.release();
      } finally {
        await waiter.close();
      }
    });

    /** `release <resource> --yes --json`: its exit code and the JSON it printed. */
    const releaseJson = async (resource: string) => {
      const result = await cli(['release', resource, '--yes', '--json', ...nodes()]);
      return { code: result.code, answer: JSON.parse(result.stdout) as unknown };
    };

    it('--json names what it released, the holder too, in the shape of the other kinds', async () => {
      const resource = unique('stuck');
      const stuck = await app.acquire(resource, { ttl: 60_000 });
      const { code, answer } = await releaseJson(resource);
      expect(code).toBe(0);
      expect(answer).toMatchObject({
        resource,
        kind: 'lock',
        holder: stuck.value,
        released: true,
        deleted: 3,
        nodes: 3,
        before: expect.any(Object),
      });
    });

    it('--json answers in the same shape when there is nothing to release, and exits 1', async () => {
      const resource = unique('free');
      const { code, answer } = await releaseJson(resource);
      expect(code).toBe(1);
      expect(answer).toEqual({
        resource,
        kind: 'lock',
        holder: null,
        released: false,
        deleted: 0,
        nodes: 3,
        before: expect.any(Object),
      });
    });

    it('refuses without --yes when stdin is not a terminal: exit 2, one line, the lock still held', async () => {
      const resource = unique('stuck');
      const lock = await app.acquire(resource, { ttl: 60_000 });
      const result = await cliProcess(['release', resource, ...nodes()]);
      expect(result).toMatchObject({ code: 2, stdout: '' });
      expect(result.stderr).toBe(
        `nestjs-redis-lock: release asks for confirmation and stdin is not a terminal: ` +
          `add --yes to release without asking, e.g. 'nestjs-redis-lock release ${resource} --yes'\n`,
      );
      expect((await app.inspect(resource)).holder).toBe(lock.value);
      await lock.release();
    });

    it('asks on a terminal: an answer other than yes keeps the lock, y releases it', async () => {
      const resource = unique('stuck');
      const lock = await app.acquire(resource, { ttl: 60_000 });
      const answer = async (reply: string) => {
        const stdin = Object.assign(new PassThrough(), { isTTY: true });
        let stdout = '';
        let stderr = '';
        const io = {
          stdin,
          stdout: { write: (text: string) => (stdout += text) },
          stderr: {
            write: (text: string) => {
              stderr += text;
              if (text.endsWith('[y/N] ')) stdin.write(`${reply}\n`);
            },
          },
          env: {},
        };
        const code = await runCli(['release', resource, ...nodes()], io);
        return { code, stdout, stderr };
      };

      const declined = await answer('n');
      expect(declined.code).toBe(1);
      expect(declined.stderr).toContain(`Force-release '${resource}'? `);
      expect(declined.stderr).toContain('Not released.');
      expect((await app.inspect(resource)).holder).toBe(lock.value);

      const accepted = await answer('y');
      expect(accepted.code).toBe(0);
      expect(accepted.stdout).toContain(`Released '${resource}'`);
      expect((await app.inspect(resource)).held).toBe(false);
    });

    it('exits 1 when no node holds the lock: nothing to release', async () => {
      const resource = unique('free');
      const result = await cli(['release', resource, '--yes', ...nodes()]);
      expect(result).toMatchObject({ code: 1, stdout: '' });
      expect(result.stderr).toBe(
        `nestjs-redis-lock: '${resource}' is not locked on any node that answered: nothing to release. ` +
          `'nestjs-redis-lock list' shows the locked resources.\n`,
      );
    });
  });

  describe('reseed', () => {
    // Counters that never expire count from 1, and a wiped node forgets them for good.
    // A prefix of its own keeps the other tests' counters out of the exact counts.
    const keyPrefix = `reseed-${randomUUID()}:`;
    let exact: LockEngine;
    beforeAll(async () => {
      exact = new LockEngine({
        nodes: urls(),
        keyPrefix,
        fenceCounter: 'resource',
        fenceCounterTtl: 0,
        logger: quietLogger(),
      });
      await exact.connect();
    });
    afterAll(() => exact.close());
    afterEach(async () => {
      await nodesBack(redis.nodes, exact);
    });

    it('raises the counters of a wiped node to the highest any node has, so the next token continues the sequence', async () => {
      const [a, b, c] = redis.nodes;
      const resource = unique('order');
      // C misses five grants, then A loses its data: only B remembers the last token.
      await c.kill();
      let last = 0;
      for (let i = 0; i < 5; i++) {
        const lock = await exact.acquire(resource);
        last = lock.token!;
        await lock.release();
      }
      await c.restart();
      await a.flushAll();
      await engineReady(exact, app);

      const args = ['reseed', '--prefix', keyPrefix, '--fence-counter-ttl', '0', ...nodes()];
      const result = await cli([...args, '--json']);
      expect(result.code).toBe(0);
      expect(json(result)).toEqual({
        pattern: '*',
        fenceCounterTtl: 0,
        raised: { [label(0)]: 1, [label(1)]: 0, [label(2)]: 1 },
        total: 2,
      });
      expect(await a.cli('PTTL', `${keyPrefix}{${resource}}:fence`)).toBe('-1');

      const again = await cli(args);
      expect(again.code).toBe(0);
      const width = Math.max(...[0, 1, 2].map((i) => label(i).length));
      expect(again.stdout).toBe(
        [
          `${'NODE'.padEnd(width)}  RAISED`,
          ...[0, 1, 2].map((i) => `${label(i).padEnd(width)}  ${'0'.padStart(6)}`),
          '',
          "Every fence counter matching '*' was already at its highest value on every node.",
          '',
        ].join('\n'),
      );

      // The next grant can only come from A and C, the two that lost the count.
      await b.kill();
      const lock = await exact.acquire(resource, { waitTimeout: 10_000 });
      expect(lock.token).toBe(last + 1);
      await lock.release();
    });

    it('raises the one counter of a wiped node (fenceCounter node) to the highest any node has', async () => {
      const [a, b] = redis.nodes;
      const prefix = `reseed-node-${randomUUID()}:`;
      const counting = new LockEngine({ nodes: urls(), keyPrefix: prefix, logger: quietLogger() });
      await counting.connect();
      try {
        const resource = unique('order');
        const first = await counting.acquire(resource);
        await first.release();
        await a.flushAll();
        const result = await cli(['reseed', '--prefix', prefix, '--json', ...nodes()]);
        expect(result.code).toBe(0);
        expect(json(result)).toMatchObject({
          raised: { [label(0)]: 1, [label(1)]: 0, [label(2)]: 0 },
        });
        expect(await a.cli('GET', `${prefix}fence`)).toBe(String(first.token));
        expect(await a.cli('PTTL', `${prefix}fence`)).toBe('-1');
        // Said in words too: the raised node counter is not one of the counters that expire.
        await a.flushAll();
        const told = await cli(['reseed', '--prefix', prefix, ...nodes()]);
        expect(told.stdout).toContain(
          "(matching '*'; raised per-resource counters live 1 h 0 min; a node's own counter never expires).",
        );
        // The next grant can only come from A and C, and goes on from the last token.
        await b.kill();
        const next = await counting.acquire(unique('other'), { waitTimeout: 10_000 });
        expect(next.token).toBeGreaterThan(first.token!);
        await next.release();
      } finally {
        await counting.close();
      }
    });

    it('refuses a --fence-counter-ttl that would let the counters of a fenceCounterTtl 0 app lapse', async () => {
      const resource = unique('order');
      const lock = await exact.acquire(resource);
      await lock.release();
      await redis.nodes[0].flushAll();
      const result = await cli(['reseed', '--prefix', keyPrefix, ...nodes()]);
      expect(result).toMatchObject({ code: 2, stdout: '' });
      expect(result.stderr.trimEnd().split('\n')).toHaveLength(1);
      expect(result.stderr).toContain(
        'so the app runs with fenceCounterTtl 0: write --fence-counter-ttl 0',
      );
      // Nothing was raised.
      expect(await redis.nodes[0].cli('GET', `${keyPrefix}{${resource}}:fence`)).toBe('');
    });

    it('exits 1 and raises nothing while a node is down, since it would keep its low counters', async () => {
      await redis.nodes[2].kill();
      const result = await cli([
        'reseed',
        '--prefix',
        keyPrefix,
        '--fence-counter-ttl',
        '0',
        ...nodes(),
      ]);
      expect(result).toMatchObject({ code: 1, stdout: '' });
      expect(result.stderr).toContain(
        `reseed needs every node to answer, and 1 of 3 nodes did not (${label(2)}: not connected (connect ECONNREFUSED`,
      );
    });
  });

  describe('health', () => {
    it('reports every node up with its latency, and the quorum', async () => {
      const result = await cli(['health', ...nodes()]);
      expect(result.code).toBe(0);
      const lines = result.stdout.trimEnd().split('\n');
      expect(lines[0].split(/\s+/)).toEqual(['NODE', 'STATUS', 'LATENCY']);
      lines.slice(1, 4).forEach((line, i) => {
        expect(line).toMatch(new RegExp(`^${literal(label(i))} +up +\\d+(\\.\\d\\d)? ms$`));
      });
      expect(lines[5]).toBe('Quorum reachable: 3 of 3 nodes up, 2 needed.');
    });

    it('still has a quorum with one node down, and exits 0', async () => {
      await redis.nodes[0].kill();
      const result = await cli(['health', '--json', ...nodes()]);
      expect(result.code).toBe(0);
      expect(json(result)).toMatchObject({
        quorum: true,
        required: 2,
        up: 2,
        nodes: [
          {
            node: label(0),
            up: false,
            latency: null,
            error: expect.stringContaining('connect ECONNREFUSED'),
          },
          { node: label(1), up: true, latency: expect.any(Number), error: null },
          { node: label(2), up: true, latency: expect.any(Number), error: null },
        ],
      });
    });

    it('exits 1 with "No quorum" when a majority of the nodes is down', async () => {
      await Promise.all([redis.nodes[0].kill(), redis.nodes[1].kill()]);
      const result = await cli(['health', ...nodes()]);
      expect(result.code).toBe(1);
      expect(result.stdout).toMatch(new RegExp(`${literal(label(0))} +down +- +not connected`));
      expect(result.stdout).toContain(
        'No quorum: 1 of 3 nodes up, 2 needed; no lock can be granted.',
      );
    });
  });
});

describe('usage errors: exit 2 and one line that says what to write', () => {
  const somewhere = ['--nodes', 'redis://127.0.0.1:6379'];
  it.each([
    [
      'no command',
      [],
      "name a command (inspect, list, release, reseed, health), e.g. 'nestjs-redis-lock health --nodes redis://127.0.0.1:6379'",
    ],
    [
      'a misspelt command',
      ['inpsect', 'order:42'],
      "unknown command 'inpsect' (did you mean inspect?)",
    ],
    [
      'a missing resource',
      ['inspect', ...somewhere],
      'inspect needs a resource: write nestjs-redis-lock inspect <resource>, e.g. nestjs-redis-lock inspect order:42',
    ],
    [
      'an unquoted pattern the shell expanded',
      ['list', 'order-1.txt', 'order-2.txt', ...somewhere],
      "list takes at most one pattern (got also 'order-2.txt'): quote it so the shell does not expand it, e.g. nestjs-redis-lock list 'order:*'",
    ],
    [
      'an unknown option',
      ['list', '--lmit', '5', ...somewhere],
      "unknown option --lmit (did you mean --limit?); run 'nestjs-redis-lock list --help' for the options",
    ],
    [
      "another command's option",
      ['inspect', 'order:42', '--yes', ...somewhere],
      "--yes is an option of 'release', not of 'inspect'",
    ],
    [
      'a limit that is no number',
      ['list', '--limit', 'ten', ...somewhere],
      "--limit takes a whole number from 1 to 100000 (got 'ten'): write e.g. --limit 100",
    ],
    ['no nodes', ['health'], 'no Redis nodes given: add --nodes redis://10.0.0.1:6379,'],
    [
      'a node that is no redis:// URL',
      ['health', '--nodes', 'localhost:6379'],
      "--nodes takes redis:// (or rediss:// for TLS) URLs separated by commas, e.g. redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379 (got 'localhost:6379')",
    ],
    [
      'an option without its value',
      ['health', '--nodes'],
      '--nodes needs a value: write --nodes <urls>',
    ],
    [
      'a fence counter lifetime the engine cannot have',
      ['reseed', '--fence-counter-ttl', '5000', ...somewhere],
      "--fence-counter-ttl is the app's fenceCounterTtl in ms, 0 or at least 60000 (got '5000')",
    ],
    [
      "a semaphore's N that is no whole number",
      ['inspect', 'payments', '--permits', '0', ...somewhere],
      "--permits is the semaphore's N, a whole number from 1 to 10000 (got '0'): write e.g. --permits 4",
    ],
    [
      '--permits for another command than inspect',
      ['list', '--permits', '4', ...somewhere],
      "--permits is an option of 'inspect', not of 'list'",
    ],
    [
      'a prefix with braces',
      ['inspect', 'order:42', '--prefix', 'lock:{x}', ...somewhere],
      "--prefix is the app's keyPrefix and has no '{' or '}'",
    ],
  ])('%s', async (_, args, message) => {
    const result = await cli(args);
    expect(result.code).toBe(2);
    expect(result.stdout).toBe('');
    expect(result.stderr.endsWith('\n')).toBe(true);
    expect(result.stderr.slice(0, -1)).not.toContain('\n');
    expect(result.stderr).toContain(`nestjs-redis-lock: ${message}`);
  });

  it('takes the nodes from REDIS_LOCK_NODES, and names that variable when they are wrong', async () => {
    const result = await cli(['health'], { REDIS_LOCK_NODES: 'redis://127.0.0.1:6379 tcp://x:1' });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(
      'REDIS_LOCK_NODES takes redis:// (or rediss:// for TLS) URLs separated by commas, e.g. ',
    );
    expect(result.stderr).toContain("(got 'tcp://x:1')");
  });
});

describe('help and version', () => {
  it('--version prints the package version and needs no nodes', async () => {
    expect(await cliProcess(['--version'])).toMatchObject({
      code: 0,
      stdout: `${VERSION}\n`,
      stderr: '',
    });
  });

  it('--help lists the commands, options and exit codes', async () => {
    const result = await cli(['--help']);
    expect(result.code).toBe(0);
    for (const text of [
      'inspect <resource>',
      'list [pattern]',
      'release <resource>',
      'reseed [pattern]',
      'health',
      '--nodes <urls>',
      '--fence-counter-ttl <ms>',
      'Exit codes: 0 done, 1 failed',
    ])
      expect(result.stdout).toContain(text);
  });

  it('<command> --help explains that command, its own options and its exit codes', async () => {
    const result = await cli(['release', '--help']);
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(/^nestjs-redis-lock release: force-release a stuck lock/);
    expect(result.stdout).toContain('-y, --yes');
    expect(result.stdout).toContain('--holder <value>');
    expect(result.stdout).toContain(
      'Exit code 1 when no node held it (nothing released),\nwhen it was declined',
    );
    expect((await cli(['help', 'list'])).stdout).toContain('--limit <n>');
  });
});

describe('passwords in node URLs', () => {
  const password = 'Pa$$w0rd@cli:/x';
  const encoded = encodeURIComponent(password);
  const redis = useRedisNodes(1, { requirepass: password });
  const secrets = (result: CliResult) => {
    const all = result.stdout + result.stderr;
    return [password, encoded, decodeURIComponent(encoded)].filter((s) => all.includes(s));
  };

  it('never appear in the output of a command that works', async () => {
    const url = redis.nodes[0].url;
    expect(url).toContain(encoded);
    for (const args of [
      ['health'],
      ['health', '--json'],
      ['inspect', 'order:42', '--json'],
      ['list'],
    ]) {
      const result = await cli([...args, '--nodes', url]);
      expect(result.code).toBe(0);
      expect(secrets(result)).toEqual([]);
    }
  });

  it('never appear when the password is wrong: the node is down with WRONGPASS, exit 1', async () => {
    const wrong = redis.nodes[0].url.replace(encoded, encodeURIComponent(`${password}-old`));
    const result = await cli(['health', '--nodes', wrong]);
    expect(result.code).toBe(1);
    expect(result.stdout).toContain('not connected (WRONGPASS');
    expect(secrets(result)).toEqual([]);
    expect(result.stdout + result.stderr).not.toContain(`${password}-old`);
  });

  it('are masked in a usage error that quotes the URL', async () => {
    const result = await cli(['health', '--nodes', `http://admin:${encoded}@127.0.0.1:6379`]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("(got 'http://admin:***@127.0.0.1:6379')");
    expect(secrets(result)).toEqual([]);
  });
});
