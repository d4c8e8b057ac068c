import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import {
  LockEngine,
  LockOptionsError,
  LockUnavailableError,
  type LockNodeSpec,
} from '../../lib/engine/index.js';
import { quietLogger } from '../support/quiet-logger.js';
import { RedisNodeProcess } from '../../dev/redis/redis-nodes.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';

const PASSWORD = 'secret-Zq7';
const ACL_PASSWORD = 'pw-Kx3';

const redis = useRedisNodes(3);
const unique = (name: string) => `${name}:${randomUUID()}`;
const keyOf = (resource: string) => `lock:{${resource}}`;

let guarded: RedisNodeProcess;
const engines: LockEngine[] = [];
const clients: Redis[] = [];

beforeAll(async () => {
  guarded = await RedisNodeProcess.start({ requirepass: PASSWORD });
  await guarded.cli('ACL', 'SETUSER', 'locker', 'on', `>${ACL_PASSWORD}`, '~*', '+@all');
});
afterAll(() => guarded.stop());
afterEach(async () => {
  // While the nodes still run: quitting a client of a stopped node fails.
  await Promise.all([
    ...engines.splice(0).map((e) => e.close()),
    ...clients.splice(0).map((c) => c.quit()),
  ]);
});

async function connected(nodes: readonly LockNodeSpec[], logger = quietLogger()) {
  const engine = new LockEngine({ nodes, logger });
  engines.push(engine);
  await engine.connect();
  return engine;
}

/** A client of the test's own, to look at a node's keys. */
function inspect(url: string): Redis {
  const client = new Redis(url);
  clients.push(client);
  return client;
}

/** Grants, finds its key on `client`, releases, and finds the key gone. */
async function expectLockRoundTrip(engine: LockEngine, client: Redis): Promise<void> {
  const resource = unique('order');
  const lock = await engine.tryAcquire(resource);
  expect(lock.token).toBeGreaterThan(0);
  expect(await client.get(keyOf(resource))).toBe(lock.value);
  await lock.release();
  expect(await client.exists(keyOf(resource))).toBe(0);
}

describe('nodes given in each form', () => {
  const forms: [string, (node: RedisNodeProcess) => LockNodeSpec][] = [
    ['URL strings', (node) => node.url],
    ['ioredis options ({ host, port })', (node) => ({ host: node.host, port: node.port })],
    [
      'ioredis clients the user owns',
      (node) => {
        const client = new Redis(node.url);
        clients.push(client);
        return client;
      },
    ],
  ];

  it.each(forms)(
    'grants, holds on every node and releases with nodes given as %s',
    async (_, spec) => {
      const engine = await connected(redis.nodes.map(spec));
      const resource = unique('form');
      const lock = await engine.tryAcquire(resource);
      // The grant settles once a quorum answered; a PING on each of the engine's connections
      // comes back only after the last node ran what was sent before it.
      const settled = () => Promise.all(engine.nodes.map((node) => node.client.ping()));
      await settled();
      const views = redis.nodes.map((n) => inspect(n.url));
      expect(await Promise.all(views.map((c) => c.get(keyOf(resource))))).toEqual([
        lock.value,
        lock.value,
        lock.value,
      ]);
      // The release settles once a quorum has answered; the last node deletes its copy as well.
      const result = await lock.release();
      expect(result.released).toBe(true);
      expect(result.nodesReleased).toBeGreaterThanOrEqual(2);
      await settled();
      expect(await Promise.all(views.map((c) => c.exists(keyOf(resource))))).toEqual([0, 0, 0]);
    },
  );

  it('on close, ends the connections it opened and leaves the user-owned client ready and usable', async () => {
    const [a, b, c] = redis.nodes;
    const mine = new Redis(a.url);
    clients.push(mine);
    const engine = await connected([mine, b.url, { host: c.host, port: c.port }]);
    await (await engine.tryAcquire(unique('owned'))).release();

    await engine.close();
    expect(engine.nodes.map((n) => n.owned)).toEqual([false, true, true]);
    expect(engine.nodes.map((n) => n.client.status)).toEqual(['ready', 'end', 'end']);
    expect(await mine.ping()).toBe('PONG');
  });

  it('connects a lazyConnect client the user owns instead of reporting it unreachable', async () => {
    const mine = new Redis(redis.nodes[0].url, { lazyConnect: true });
    clients.push(mine);
    const logger = quietLogger();
    const engine = await connected([mine], logger);
    await (await engine.tryAcquire(unique('lazy'))).release();
    expect(logger.warnings).toEqual([]);
  });
});

describe('authentication', () => {
  it('reaches a node with requirepass through redis://:password@host:port', async () => {
    const url = `redis://:${PASSWORD}@127.0.0.1:${guarded.port}`;
    await expectLockRoundTrip(await connected([url]), inspect(url));
  });

  it('reaches a node with requirepass through { password }', async () => {
    const engine = await connected([
      { host: guarded.host, port: guarded.port, password: PASSWORD },
    ]);
    await expectLockRoundTrip(engine, inspect(guarded.url));
  });

  it('reaches a node as an ACL user through redis://user:password@host:port', async () => {
    const url = `redis://locker:${ACL_PASSWORD}@127.0.0.1:${guarded.port}`;
    const engine = await connected([url]);
    await expectLockRoundTrip(engine, inspect(guarded.url));
    expect(await engine.nodes[0].client.call('ACL', 'WHOAMI')).toBe('locker');
  });

  it('reaches a node as an ACL user through { username, password }', async () => {
    const engine = await connected([
      { host: guarded.host, port: guarded.port, username: 'locker', password: ACL_PASSWORD },
    ]);
    await expectLockRoundTrip(engine, inspect(guarded.url));
    expect(await engine.nodes[0].client.call('ACL', 'WHOAMI')).toBe('locker');
  });

  it('reports the release of an ACL user without channel rights as released, without a warning', async () => {
    const logger = quietLogger();
    const engine = await connected(
      [`redis://locker:${ACL_PASSWORD}@127.0.0.1:${guarded.port}`],
      logger,
    );
    const lock = await engine.tryAcquire(unique('acl-release'));
    const result = await lock.release();
    expect(result).toEqual({
      released: true,
      nodesReleased: 1,
      nodesNotHeld: 0,
      nodesPending: 0,
      failures: [],
    });
    expect(logger.warnings).toEqual([]);
  });

  it('frees every resource of a multi-resource lock released by an ACL user without channel rights', async () => {
    const url = `redis://locker:${ACL_PASSWORD}@127.0.0.1:${guarded.port}`;
    const engine = await connected([url]);
    const [a, b] = [unique('a'), unique('b')];
    await (await engine.tryAcquire([a, b], { ttl: 10_000 })).release();
    expect(await inspect(guarded.url).exists(keyOf(a), keyOf(b))).toBe(0);
  });

  /** An engine given the wrong password: the node never becomes ready. */
  async function wrongPasswordEngine(logger = quietLogger()) {
    return connected(
      [
        {
          host: guarded.host,
          port: guarded.port,
          password: 'not-the-password',
        },
      ],
      logger,
    );
  }

  it('fails acquisition with a wrong password with LockUnavailableError naming the node, and never shows the password', async () => {
    const logger = quietLogger();
    const engine = await wrongPasswordEngine(logger);
    const error = await engine.tryAcquire(unique('wrongpass')).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockUnavailableError);
    const { message, failures } = error as LockUnavailableError;
    expect(failures.map((f) => f.node)).toEqual([`127.0.0.1:${guarded.port}`]);
    expect(message).toContain(`127.0.0.1:${guarded.port}`);
    for (const text of [message, ...logger.warnings]) {
      expect(text).not.toContain('not-the-password');
      expect(text).not.toContain(PASSWORD);
    }
  });

  it('names the authentication error when a wrong password fails acquisition', async () => {
    const engine = await wrongPasswordEngine();
    const error = await engine.tryAcquire(unique('wrongpass')).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockUnavailableError);
    expect((error as Error).message).toMatch(/WRONGPASS|invalid username-password/);
  });

  it('does not echo the password of a URL it cannot parse', () => {
    const error = (() => {
      try {
        new LockEngine({ nodes: [`redis://:${PASSWORD}@127.0.0.1:99999`] });
      } catch (e) {
        return e;
      }
    })();
    expect(error).toBeInstanceOf(LockOptionsError);
    expect((error as Error).message).not.toContain(PASSWORD);
  });
});

describe('database selection', () => {
  it.each([
    ['a URL path (redis://host:port/3)', (node: RedisNodeProcess) => `${node.url}/3`],
    ['{ db: 3 }', (node: RedisNodeProcess) => ({ host: node.host, port: node.port, db: 3 })],
  ])('puts the lock and its fence counter in db 3 when selected by %s', async (_, spec) => {
    const [node] = redis.nodes;
    const engine = await connected([spec(node)]);
    const resource = unique('db');
    const db3 = inspect(`${node.url}/3`);
    const db0 = inspect(node.url);
    const lock = await engine.tryAcquire(resource);
    expect(await db3.get(keyOf(resource))).toBe(lock.value);
    expect(Number(await db3.get('lock:fence'))).toBe(lock.token);
    expect(await db0.exists(keyOf(resource))).toBe(0);
    expect(await db0.get('lock:fence')).not.toBe(String(lock.token));
    await lock.release();
    expect(await db3.exists(keyOf(resource))).toBe(0);
  });
});
