import { afterEach, describe, expect, it } from '@jest/globals';
import { existsSync } from 'node:fs';
import { Redis } from 'ioredis';
import { findRedisServer, startRedisNodes } from '../../dev/redis/redis-nodes.js';
import { useRedisNodes } from './use-redis-nodes.js';

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('redis-nodes test harness', () => {
  const redis = useRedisNodes(3);
  const clients: Redis[] = [];

  function connect(url: string, commandTimeout?: number): Redis {
    const client = new Redis(url, { commandTimeout, maxRetriesPerRequest: 0 });
    clients.push(client);
    return client;
  }

  afterEach(() => {
    // Before the nodes stop: ioredis' disconnect() on a socket that is already
    // closed leaves a 2 s timer (disconnectTimeout) that delays Jest's exit.
    for (const client of clients.splice(0)) client.disconnect();
  });

  it('starts independent nodes on distinct loopback ports, each with its own dir', async () => {
    const { nodes } = redis;
    expect(nodes).toHaveLength(3);
    expect(new Set(nodes.map((n) => n.port)).size).toBe(3);
    expect(new Set(nodes.map((n) => n.dir)).size).toBe(3);
    for (const node of nodes) {
      expect(node.url).toBe(`redis://127.0.0.1:${node.port}`);
      expect(await node.cli('CONFIG', 'GET', 'maxmemory-policy')).toBe(
        'maxmemory-policy\nnoeviction',
      );
    }
    // Independent: a write on one node is not seen by another.
    await nodes[0].cli('SET', 'only-here', '1');
    expect(await nodes[1].cli('GET', 'only-here')).toBe('');
  });

  it('keeps acknowledged writes across a SIGKILL and restart (AOF, appendfsync always)', async () => {
    const node = redis.nodes[0];
    const { port } = node;
    await node.cli('SET', 'fence:order:1', '42');
    await node.cli('INCR', 'fence:order:1');

    await node.kill();
    expect(node.isRunning).toBe(false);
    expect(node.pid).toBeUndefined();

    await node.restart();
    expect(node.port).toBe(port);
    expect(await node.cli('GET', 'fence:order:1')).toBe('43');
  });

  it('a paused node leaves commands hanging until it is resumed', async () => {
    const node = redis.nodes[1];
    const client = connect(node.url, 300);
    expect(await client.ping()).toBe('PONG');

    await node.pause();
    await expect(client.ping()).rejects.toThrow(/timed out/i);

    await node.resume();
    expect(await client.ping()).toBe('PONG');
  });

  it('ensureRunning() brings back a killed or paused node', async () => {
    const [killed, paused] = [redis.nodes[2], redis.nodes[1]];
    await killed.kill();
    await paused.pause();

    await Promise.all([killed.ensureRunning(), paused.ensureRunning()]);
    expect(await killed.cli('PING')).toBe('PONG');
    expect(await paused.cli('PING')).toBe('PONG');
  });

  it('stop() ends the process, removes its dir and is idempotent', async () => {
    const [node] = await startRedisNodes(1, { appendonly: false });
    const pid = node.pid as number;
    expect(isAlive(pid)).toBe(true);
    expect(existsSync(node.dir)).toBe(true);

    await node.stop();
    expect(isAlive(pid)).toBe(false);
    expect(existsSync(node.dir)).toBe(false);
    await node.stop();
  });

  it('requirepass puts the password in the url and into cli()', async () => {
    const [node] = await startRedisNodes(1, { requirepass: 's3cret' });
    const anonymous = new Redis(node.port, '127.0.0.1', {
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
      disconnectTimeout: 100,
    });
    anonymous.on('error', () => {}); // the NOAUTH handshake error is what we expect
    try {
      expect(node.url).toBe(`redis://:s3cret@127.0.0.1:${node.port}`);
      expect(await node.cli('PING')).toBe('PONG');
      await expect(anonymous.get('x')).rejects.toThrow(/NOAUTH|closed/);
    } finally {
      anonymous.disconnect();
      await node.stop();
    }
  });

  it('names the way to install redis-server when it cannot be found', () => {
    const saved = process.env.REDIS_SERVER_BIN;
    process.env.REDIS_SERVER_BIN = '/nonexistent/redis-server';
    try {
      expect(() => findRedisServer()).toThrow(
        "redis-server not found: install it with 'apt-get install -y redis-server' (Debian/Ubuntu) or 'brew install redis', or set REDIS_SERVER_BIN to its path",
      );
    } finally {
      if (saved === undefined) delete process.env.REDIS_SERVER_BIN;
      else process.env.REDIS_SERVER_BIN = saved;
    }
  });
});
