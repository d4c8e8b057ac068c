import { once } from 'node:events';
import { Cluster, Redis, type ClusterOptions, type RedisOptions } from 'ioredis';
import { runBySlot } from './cluster-scripts.js';
import type { LuaScript } from './lua-scripts.js';
import { ScriptLoader } from './script-loader.js';
import { hearClusterSockets, hearSocketErrors } from './socket-errors.js';
import { bounded } from './time-bound.js';
import { TurnBatch } from './turn-batch.js';
import { type ClusterNodeSpec, type LockNodeSpec } from './lock-options.js';
import { isClusterClient, isClusterSpec, isRedisClient } from './node-specs.js';

/**
 * How a node keeps its data: one server, a master found through Sentinel,
 * or a Redis Cluster (its masters together count as one node).
 */
export type LockNodeTopology = 'server' | 'sentinel' | 'cluster';

/**
 * Options for the clients the engine opens itself. Commands fail at once
 * while a node is disconnected instead of queueing: a lock attempt must count
 * that node as down, not wait for it. No auto-pipelining: the lock scripts
 * of one turn of the event loop already leave as one command (see
 * {@link LockNode.run}), and ioredis keeps only one auto-pipeline in flight
 * per connection, so that the next command would wait for the last one's
 * reply (a quick bench, 32 uncontended callers on 3 nodes: 26k cycles/s with
 * it, 35k without).
 */
const OWNED_CLIENT_DEFAULTS: RedisOptions = {
  lazyConnect: true,
  enableOfflineQueue: false,
  enableAutoPipelining: false,
  maxRetriesPerRequest: 0,
  autoResendUnfulfilledCommands: false,
  connectTimeout: 2000,
  // A node that is down when the engine closes must not keep the process alive.
  disconnectTimeout: 200,
  retryStrategy: (times) => Math.min(50 * 2 ** Math.min(times, 5), 1000),
};

/**
 * A master found through Sentinel: with the failover detector, the client
 * drops the old master as soon as a Sentinel announces the new one
 * (+switch-master), instead of writing to it until Sentinel demotes it
 * (about 10 s later, during which both accept writes).
 */
const OWNED_SENTINEL_DEFAULTS: RedisOptions = { failoverDetector: true };

/** The same policy for the clusters the engine opens: fail fast while a master is unreachable. */
const OWNED_CLUSTER_DEFAULTS: ClusterOptions = {
  lazyConnect: true,
  enableOfflineQueue: false,
  enableAutoPipelining: true,
  slotsRefreshTimeout: 2000,
  clusterRetryStrategy: (times) => Math.min(50 * 2 ** Math.min(times, 5), 1000),
  redisOptions: {
    maxRetriesPerRequest: 0,
    autoResendUnfulfilledCommands: false,
    connectTimeout: 2000,
    disconnectTimeout: 200,
  },
};

/** One lock node as the engine sees it: a server, a Sentinel-managed master, or a whole Redis Cluster. */
export class LockNode {
  /**
   * Names the node in messages and logs, without credentials: `host:port`,
   * `sentinel mymaster@host:26379,...` or `cluster host:7000,...` (its seeds).
   */
  readonly label: string;
  readonly topology: LockNodeTopology;
  /** The connection's last error, to say why a node that is not ready failed. */
  private lastError: Error | undefined;
  /** Runs the scripts by SHA, loaded on each connection before its first call. */
  private readonly scripts: ScriptLoader;
  /** A server's calls of one turn, sent together (see TurnBatch); none for a cluster, whose go by slot. */
  private readonly batch: TurnBatch | undefined;

  private constructor(
    readonly client: Redis | Cluster,
    /** True when the engine opened the client and must close it. */
    readonly owned: boolean,
    /** The engine's only node: a call that finds the server idle leaves at once (see TurnBatch). */
    sole: boolean,
    seeds?: readonly string[],
  ) {
    if (isClusterClient(client)) {
      this.topology = 'cluster';
      this.label = `cluster ${(seeds ?? clusterSeeds(client)).join(',') || '(seeds unknown)'}`;
      // A refused login to one of the masters arrives here, not as 'error'.
      client.on('node error', (error: Error) => (this.lastError = error));
    } else if (client.options.sentinels?.length) {
      const { sentinels, name } = client.options;
      this.topology = 'sentinel';
      this.label = `sentinel ${name}@${sentinels.map((s) => `${s.host ?? 'localhost'}:${s.port ?? 26379}`).join(',')}`;
    } else {
      this.topology = 'server';
      this.label = serverLabel(client);
    }
    if (isClusterClient(client)) hearClusterSockets(client);
    else hearSocketErrors(client);
    client.on('error', (error: Error) => (this.lastError = withCause(error)));
    client.on('ready', () => (this.lastError = undefined));
    this.scripts = new ScriptLoader(client, this.topology === 'cluster', () => this.servers());
    const { scripts } = this;
    this.batch =
      this.topology === 'cluster'
        ? undefined
        : new TurnBatch(scripts.run, sole ? () => scripts.idle : undefined);
  }

  /** `sole`: the engine has no other node (see TurnBatch). */
  static from(spec: LockNodeSpec, sole = false): LockNode {
    if (isRedisClient(spec)) return new LockNode(spec, false, sole);
    if (isClusterSpec(spec)) return LockNode.openCluster(spec);
    if (typeof spec === 'string') {
      return new LockNode(new Redis(spec, OWNED_CLIENT_DEFAULTS), true, sole);
    }
    const options = spec as RedisOptions;
    const defaults = options.sentinels
      ? { ...OWNED_CLIENT_DEFAULTS, ...OWNED_SENTINEL_DEFAULTS }
      : OWNED_CLIENT_DEFAULTS;
    return new LockNode(new Redis({ ...defaults, ...options }), true, sole);
  }

  private static openCluster({ cluster, options = {} }: ClusterNodeSpec): LockNode {
    // Credentials and TLS of a seed URL hold for every node the cluster discovers.
    const fromUrls: RedisOptions = {};
    const seeds = cluster.map((seed) => {
      if (typeof seed !== 'string') return { host: seed.host ?? 'localhost', port: seed.port };
      const url = new URL(seed);
      if (url.username) fromUrls.username ??= decodeURIComponent(url.username);
      if (url.password) fromUrls.password ??= decodeURIComponent(url.password);
      if (url.protocol === 'rediss:') fromUrls.tls ??= {};
      return { host: url.hostname.replace(/^\[|\]$/g, ''), port: Number(url.port || 6379) };
    });
    const client = new Cluster(seeds, {
      ...OWNED_CLUSTER_DEFAULTS,
      ...options,
      redisOptions: {
        ...OWNED_CLUSTER_DEFAULTS.redisOptions,
        ...fromUrls,
        ...options.redisOptions,
      },
    });
    return new LockNode(
      client,
      true,
      false,
      seeds.map((s) => `${s.host}:${s.port}`),
    );
  }

  /**
   * Whether the node can keep one fence counter for all resources
   * (`fenceCounter: 'node'`): not a cluster, whose scripts reach one slot only.
   */
  get keepsNodeCounter(): boolean {
    return this.topology !== 'cluster';
  }

  /**
   * The servers that hold this node's keys, for commands that concern a
   * server rather than a key (SCAN, INFO, CONFIG, PING): the client itself,
   * or every master of a cluster (connections the cluster client owns).
   */
  servers(): Redis[] {
    return isClusterClient(this.client) ? this.client.nodes('master') : [this.client];
  }

  /**
   * Wakes the waiters of a lock key freed outside the release script (a
   * forced release): PUBLISH, or SPUBLISH on a cluster (see RELEASE).
   */
  notifyRelease(key: string): Promise<unknown> {
    return isClusterClient(this.client)
      ? this.client.spublish(key, '')
      : this.client.publish(key, '');
  }

  /**
   * Opens a lazy client (the engine's or the caller's); resolves true once it
   * is ready, false if it could not connect in time or was refused for good
   * (wrong password, missing permissions): see {@link connectionError}.
   */
  async connect(timeoutMs: number): Promise<boolean> {
    const ready = await this.open(timeoutMs);
    // A cluster's masters get the scripts now; a server's connection gets them before its first call.
    if (ready && this.topology === 'cluster') this.scripts.loadEverywhere();
    return ready;
  }

  private async open(timeoutMs: number): Promise<boolean> {
    const { client } = this;
    if (client.status === 'ready') return true;
    if (client.status === 'wait') client.connect().catch(() => undefined);
    return new Promise<boolean>((resolve) => {
      const done = (ready: boolean) => {
        clearTimeout(timer);
        client.off('ready', onReady);
        client.off('error', onError);
        client.off('node error', onError);
        resolve(ready);
      };
      const onReady = () => done(true);
      const onError = (error: Error) => {
        if (isRefusal(error)) done(false);
      };
      const timer = setTimeout(() => done(client.status === 'ready'), timeoutMs);
      timer.unref();
      client.on('ready', onReady);
      client.on('error', onError);
      client.on('node error', onError);
    });
  }

  /** Why the node is not ready, when it is not. */
  /**
   * The error to report for a failed command: for a node that is not
   * connected, why (ioredis only says its stream is not writeable).
   */
  explain(reason: unknown): Error {
    const connection = this.connectionError;
    if (connection) return new Error(`not connected (${connection.message})`);
    return reason instanceof Error ? reason : new Error(String(reason));
  }

  get connectionError(): Error | undefined {
    return this.client.status === 'ready' ? undefined : this.lastError;
  }

  /**
   * Runs a script by SHA; after SCRIPT FLUSH or a restart, by source (which
   * caches it again). On a cluster, keys of several slots make one call per
   * slot, all or nothing (see cluster-scripts.ts). On a server, the calls
   * made in the same turn of the event loop leave together, in order: the
   * lock scripts among them as one BATCH command (see {@link TurnBatch}).
   */
  run(
    script: LuaScript,
    keys: readonly string[],
    args: readonly (string | number)[],
  ): Promise<unknown> {
    if (this.client.status !== 'ready' && this.lastError && this.owned) {
      return Promise.reject(new Error(`not connected (${this.lastError.message})`));
    }
    // A server always has its batch; a cluster has none.
    if (this.batch) return this.batch.run(script, keys, args);
    return runBySlot(script, keys, args, this.scripts.run);
  }

  async close(): Promise<void> {
    const { client } = this;
    if (!this.owned || client.status === 'end') return;
    // Calls made in this turn (the clean-up of an attempt that just failed) leave before QUIT.
    this.batch?.flush();
    if (client.status !== 'ready') {
      // Connecting or reconnecting: nothing to say goodbye to, and no 'end' to wait for.
      client.disconnect();
      return;
    }
    // QUIT resolves on the server's OK; the socket closes a moment later.
    // once() also rejects on an 'error' event (a reset socket, say): closing goes on regardless.
    const ended = once(client, 'end').catch(() => undefined);
    // Bounded: a node that hangs (a paused process, a black hole) never answers QUIT.
    const answered = await bounded(client.quit(), 1000, { unref: true }).then(
      () => true,
      () => false,
    );
    if (!answered) client.disconnect();
    await bounded(ended, 1000, { unref: true }).catch(() => undefined);
    // A QUIT that failed (the socket was reset under it) leaves a client that reconnects and
    // keeps the process alive: end it for good.
    if ((client.status as string) !== 'end') client.disconnect();
    if (this.topology === 'sentinel') closeSentinelWatch(client as Redis);
  }
}

/**
 * Ends the Sentinel connections of a client's failover detector, which QUIT
 * leaves open (ioredis 5 and 6 close them on disconnect() only); they would
 * keep the process alive, reconnecting to Sentinels that went away.
 */
export function closeSentinelWatch(client: Redis): void {
  if (client.options.failoverDetector) client.disconnect();
}

/**
 * A cluster client's error with what its last seed answered: its own message
 * alone ("Failed to refresh slots cache.") reads as a network problem even
 * where the seed answered, e.g. a server that is not in cluster mode.
 */
function withCause(error: Error): Error {
  const last = (error as { lastNodeError?: unknown }).lastNodeError;
  if (!(last instanceof Error) || error.message.includes(last.message)) return error;
  return new Error(`${error.message} (${last.message})`, { cause: error });
}

/** `host:port` of one server connection (a cluster's master, say). */
export function serverLabel(server: Redis): string {
  const { host, port, path } = server.options;
  return path ?? `${host ?? 'localhost'}:${port ?? 6379}`;
}

/** A cluster client's seed nodes as `host:port` (ioredis keeps them in a private field). */
function clusterSeeds(client: Cluster): string[] {
  const seeds = (client as unknown as { startupNodes?: unknown }).startupNodes;
  if (!Array.isArray(seeds)) return [];
  return seeds.map((seed: unknown) => {
    if (typeof seed === 'object' && seed !== null) {
      const { host, port } = seed as { host?: string; port?: number };
      return `${host ?? 'localhost'}:${port ?? 6379}`;
    }
    if (typeof seed === 'number') return `localhost:${seed}`;
    // A URL may carry a password: keep only host and port.
    const text = String(seed);
    try {
      const url = new URL(text.includes('://') ? text : `redis://${text}`);
      return `${url.hostname}:${url.port || 6379}`;
    } catch {
      return '(seed)';
    }
  });
}

/**
 * Errors that settle the start-up question at once: nothing listens there
 * (the client keeps reconnecting in the background), or the server refuses
 * these credentials (a reconnect will not cure that).
 */
function isRefusal(error: Error): boolean {
  return (
    (error as NodeJS.ErrnoException).code === 'ECONNREFUSED' ||
    /^(WRONGPASS|NOAUTH|NOPERM)/.test(error.message)
  );
}
