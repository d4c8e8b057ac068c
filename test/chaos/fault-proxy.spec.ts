import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { once } from 'node:events';
import { Redis } from 'ioredis';
import { useRedisNodes } from '../support/use-redis-nodes.js';
import { FaultProxy } from './fault-proxy.js';

const redis = useRedisNodes(1);

/** Resolves when the client's connection has ended (a reset emits 'error' first, which is expected here). */
const ended = (client: Redis) =>
  new Promise<void>((resolve) => client.once('end', () => resolve()));

/** Resolves with the promise's value, or 'no reply' if it takes longer than `ms`. */
function within<T>(promise: Promise<T>, ms: number): Promise<T | 'no reply'> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise,
    new Promise<'no reply'>((resolve) => (timer = setTimeout(() => resolve('no reply'), ms))),
  ]).finally(() => clearTimeout(timer));
}

describe('fault proxy', () => {
  let proxy: FaultProxy;
  const clients: Redis[] = [];

  beforeAll(async () => {
    proxy = await FaultProxy.start(redis.nodes[0].port);
  });
  afterEach(() => {
    proxy.set({ kind: 'pass' });
    for (const c of clients.splice(0)) c.disconnect();
  });
  afterAll(() => proxy.close());

  function track(client: Redis): Redis {
    client.on('error', () => undefined);
    clients.push(client);
    return client;
  }

  /** A client of the node itself, past the proxy. */
  const direct = () => track(new Redis(redis.nodes[0].url, { disconnectTimeout: 100 }));

  async function connect(): Promise<Redis> {
    const client = new Redis({
      port: proxy.port,
      host: '127.0.0.1',
      lazyConnect: true,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
      enableOfflineQueue: false,
      disconnectTimeout: 100,
    });
    track(client);
    await client.connect();
    return client;
  }

  it('passes requests and replies through unchanged', async () => {
    const client = await connect();
    await client.set('proxy:pass', 'value');
    expect(await client.get('proxy:pass')).toBe('value');
  });

  it('delays replies by the configured time, in order, and stops delaying when switched back', async () => {
    const client = await connect();
    // A delay far above what a loaded machine adds to a local round trip (100 ms was seen beside
    // two CPU-bound processes and a test suite), so that "no longer delayed" reads unambiguously.
    proxy.set({ kind: 'delay', ms: 1000 });
    const started = performance.now();
    const replies = await Promise.all([client.ping('a'), client.ping('b'), client.ping('c')]);
    expect(replies).toEqual(['a', 'b', 'c']);
    expect(performance.now() - started).toBeGreaterThanOrEqual(995);
    proxy.set({ kind: 'pass' });
    const quick = performance.now();
    await client.ping();
    expect(performance.now() - quick).toBeLessThan(500);
  });

  it('drops: resets open connections and every new one', async () => {
    const client = await connect();
    const closed = ended(client);
    proxy.set({ kind: 'drop' });
    await closed;
    await expect(connect()).rejects.toThrow();
    proxy.set({ kind: 'pass' });
    expect(await (await connect()).ping()).toBe('PONG');
  });

  it('blackholes: forwards nothing, and resets the connections that lost bytes once lifted', async () => {
    const client = await connect();
    const node = direct();
    proxy.set({ kind: 'blackhole' });
    expect(await within(client.set('proxy:blackhole', 'lost'), 200)).toBe('no reply');
    expect(await node.get('proxy:blackhole')).toBeNull();
    const closed = ended(client);
    proxy.set({ kind: 'pass' });
    await closed;
    expect(await (await connect()).ping()).toBe('PONG');
  });

  it('one-way: the server runs the commands, the client hears nothing', async () => {
    const client = await connect();
    const node = direct();
    proxy.set({ kind: 'one-way' });
    expect(await within(client.set('proxy:one-way', 'ran'), 200)).toBe('no reply');
    expect(await node.get('proxy:one-way')).toBe('ran');
  });

  it('traps the connection that sends a marker and holds its replies until released', async () => {
    const client = await connect();
    const other = await connect();
    const trapped = proxy.trap(['proxy:trapped'], 'replies');
    const reply = client.get('proxy:trapped');
    const link = await trapped;
    expect(await within(reply, 100)).toBe('no reply');
    // Other connections are not held.
    expect(await other.ping()).toBe('PONG');
    link.release();
    expect(await reply).toBeNull();
  });

  it('closes the server side when the client goes, leaving no connection behind', async () => {
    const own = await FaultProxy.start(redis.nodes[0].port);
    const node = direct();
    const count = async () =>
      String(await node.call('CLIENT', 'LIST'))
        .trim()
        .split('\n').length;
    const before = await count();
    const client = track(new Redis({ port: own.port, host: '127.0.0.1', disconnectTimeout: 100 }));
    await client.ping();
    expect(own.openConnections).toBe(1);
    expect(await count()).toBe(before + 1);
    const gone = once(own, 'link-closed');
    await client.quit();
    await gone;
    expect(own.openConnections).toBe(0);
    await own.close();
  });
});
