import { afterEach, describe, expect, it } from '@jest/globals';
import type { Cluster, Redis } from 'ioredis';
import {
  LockEngine,
  LockOptionsError,
  resolveEngineOptions,
  type LockNodeSpec,
} from '../../lib/engine/internal.js';
import { quietLogger } from '../support/quiet-logger.js';

/** The message of the LockOptionsError that `nodes: [spec]` is refused with. */
function refusal(spec: unknown): string {
  try {
    resolveEngineOptions({ nodes: [spec] });
  } catch (error) {
    expect(error).toBeInstanceOf(LockOptionsError);
    return (error as Error).message;
  }
  throw new Error(`accepted ${JSON.stringify(spec)}`);
}

const CLUSTER_EXAMPLE =
  "{ cluster: [{ host: '10.0.0.1', port: 7000 }], options: { redisOptions: { password } } }";
const SENTINEL_EXAMPLE = "{ sentinels: [{ host: '10.0.0.1', port: 26379 }], name: 'mymaster' }";

describe('cluster and Sentinel node specs', () => {
  it('refuses a cluster without seed nodes, saying what to write', () => {
    expect(refusal({ cluster: [] })).toBe(
      `nodes[0].cluster must list one or more seed nodes of the cluster, e.g. ${CLUSTER_EXAMPLE} (got an array).`,
    );
    expect(refusal({ cluster: 'redis://10.0.0.1:7000' })).toContain(
      "nodes[0].cluster must list one or more seed nodes of the cluster, e.g. { cluster: [{ host: '10.0.0.1'",
    );
  });

  it('refuses a seed that is neither a redis:// URL nor { host, port }', () => {
    expect(refusal({ cluster: ['http://10.0.0.1:7000'] })).toBe(
      "nodes[0].cluster[0] uses 'http:'; use redis:// or rediss:// (TLS).",
    );
    expect(refusal({ cluster: [{ host: '10.0.0.1' }] })).toBe(
      'nodes[0].cluster[0] must be a redis://host:port URL or { host, port } with a TCP port number (got an object).',
    );
    expect(refusal({ cluster: [{ host: '10.0.0.1', port: 70000 }] })).toContain(
      'nodes[0].cluster[0] must be a redis://host:port URL or { host, port }',
    );
  });

  it('refuses connection settings beside the seeds, pointing to options.redisOptions', () => {
    expect(refusal({ cluster: [{ port: 7000 }], password: 'secret' })).toBe(
      "nodes[0] is a cluster and takes only 'cluster' (the seed nodes) and 'options' (ioredis Cluster options), " +
        `not 'password'; connection settings go in options.redisOptions, e.g. ${CLUSTER_EXAMPLE}.`,
    );
    expect(refusal({ cluster: [{ port: 7000 }], options: [] })).toBe(
      'nodes[0].options must be ioredis Cluster options such as { redisOptions: { password } } (got an array).',
    );
  });

  it('points the usual misspellings of a cluster to the right form', () => {
    for (const wrong of [{ clusters: [{ port: 7000 }] }, { startupNodes: [{ port: 7000 }] }]) {
      expect(refusal(wrong)).toBe(`nodes[0]: write a Redis Cluster as ${CLUSTER_EXAMPLE}.`);
    }
  });

  it('refuses Sentinel options without the master name or without sentinels', () => {
    expect(refusal({ sentinels: [{ host: '10.0.0.1', port: 26379 }] })).toBe(
      `nodes[0] reaches its master through Sentinel: also give the master's name as Sentinel knows it, e.g. ${SENTINEL_EXAMPLE}.`,
    );
    expect(refusal({ sentinels: [], name: 'mymaster' })).toBe(
      `nodes[0].sentinels must list the Sentinels as { host, port } objects, e.g. ${SENTINEL_EXAMPLE} (got an array).`,
    );
  });

  it('names the other node forms in the message for something that is none of them', () => {
    expect(refusal(42)).toBe(
      'nodes[0] must be a redis:// URL, ioredis options ({ host, port, ... } or { sentinels, name }), ' +
        `a cluster (${CLUSTER_EXAMPLE}) or an ioredis client (got 42).`,
    );
  });
});

describe('the clients the engine opens for them', () => {
  const engines: LockEngine[] = [];
  afterEach(async () => {
    await Promise.all(engines.splice(0).map((e) => e.close()));
  });
  const engine = (nodes: LockNodeSpec[]) => {
    const created = new LockEngine({ nodes, logger: quietLogger() });
    engines.push(created);
    return created;
  };

  it('opens a Cluster whose seed URLs lend their credentials and TLS to every node, never to the label', () => {
    const [node] = engine([
      { cluster: ['rediss://locker:s3cret@10.0.0.1:7000', { host: '10.0.0.2', port: 7001 }] },
    ]).nodes;
    expect(node).toMatchObject({
      topology: 'cluster',
      owned: true,
      label: 'cluster 10.0.0.1:7000,10.0.0.2:7001',
    });
    const { options } = node.client as Cluster;
    expect(options.redisOptions).toMatchObject({
      username: 'locker',
      password: 's3cret',
      tls: {},
      maxRetriesPerRequest: 0,
    });
    expect(options).toMatchObject({ enableOfflineQueue: false, enableAutoPipelining: true });
  });

  it('lets the options given win over the engine’s defaults and the URLs', () => {
    const [node] = engine([
      {
        cluster: ['redis://:from-url@10.0.0.1:7000'],
        options: { slotsRefreshTimeout: 5000, redisOptions: { password: 'given' } },
      },
    ]).nodes;
    const { options } = node.client as Cluster;
    expect(options.slotsRefreshTimeout).toBe(5000);
    expect(options.redisOptions?.password).toBe('given');
  });

  it('opens a Sentinel-backed client that follows failovers as soon as they are announced', () => {
    const [node] = engine([
      { sentinels: [{ host: '10.0.0.1', port: 26379 }, { host: '10.0.0.2' }], name: 'orders' },
    ]).nodes;
    expect(node).toMatchObject({
      topology: 'sentinel',
      owned: true,
      label: 'sentinel orders@10.0.0.1:26379,10.0.0.2:26379',
    });
    expect((node.client as Redis).options).toMatchObject({
      failoverDetector: true,
      enableOfflineQueue: false,
    });
  });

  it('opens a server client without auto-pipelining: the engine batches the scripts of a tick itself', () => {
    const [node] = engine(['redis://10.0.0.1:6379']).nodes;
    expect(node.topology).toBe('server');
    expect((node.client as Redis).options).toMatchObject({
      enableOfflineQueue: false,
      enableAutoPipelining: false,
    });
  });
});
