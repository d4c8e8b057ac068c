/**
 * Real Redis topologies built from the redis-server harness (dev/redis/redis-nodes.ts),
 * framework-free like it:
 *
 * - a Redis Cluster: `masters` cluster-enabled servers joined by
 *   `redis-cli --cluster create`, replicas added on demand;
 * - a Sentinel set-up: a master, its replica, and one Sentinel watching them,
 *   with a forced failover that resolves once Sentinel announced it.
 *
 * ```ts
 * const cluster = await RedisClusterProcess.start();
 * try {
 *   const client = new Cluster(cluster.seeds);
 * } finally {
 *   await cluster.stop();
 * }
 * ```
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { delimiter, dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { hashSlot } from '../../lib/engine/cluster-scripts.js';
import {
  findRedisServer,
  RedisNodeProcess,
  startRedisNodes,
  stopRedisNodes,
  type RedisNodeOptions,
} from '../../dev/redis/redis-nodes.js';
import { isExecutable, withParentDeathSignal } from '../../dev/processes.js';

/** How long a cluster may take to agree on its slots, or a replica to attach. */
export const TOPOLOGY_SETTLE_TIMEOUT_MS = 15_000;
/** The pause between two looks at a state Redis sends no event for. */
const POLL_MS = 25;

export interface HostPort {
  readonly host: string;
  readonly port: number;
}

/** REDIS_CLI_BIN if set, else `redis-cli` beside redis-server or on PATH. */
export function findRedisCli(): string {
  const fromEnv = process.env.REDIS_CLI_BIN;
  const candidates = [
    ...(fromEnv ? [fromEnv] : []),
    join(dirname(findRedisServer()), 'redis-cli'),
    ...(process.env.PATH ?? '').split(delimiter).map((dir) => join(dir || '.', 'redis-cli')),
  ];
  const found = candidates.find(isExecutable);
  if (found) return found;
  throw new Error(
    "redis-cli not found: it comes with redis-server ('apt-get install -y redis-server'), or set REDIS_CLI_BIN",
  );
}

/** Runs redis-cli to completion; rejects with its output when it fails. */
async function redisCli(args: readonly string[]): Promise<string> {
  const [command, ...rest] = withParentDeathSignal([findRedisCli(), ...args]);
  const child = spawn(command, rest, { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const [code] = (await once(child, 'exit')) as [number | null];
  if (code !== 0) throw new Error(`redis-cli ${args.join(' ')} failed (${code}):\n${output}`);
  return output;
}

/**
 * Polls `check` until it returns a value other than undefined, for states
 * Redis announces with no event (cluster state, replica links). Bounded:
 * throws `what` after `timeoutMs`.
 */
async function pollUntil<T>(
  what: string,
  check: () => Promise<T | undefined>,
  timeoutMs = TOPOLOGY_SETTLE_TIMEOUT_MS,
): Promise<T> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (performance.now() >= deadline) throw new Error(`${what} (after ${timeoutMs} ms)`);
    await sleep(POLL_MS);
  }
}

function field(info: string, name: string): string | undefined {
  return new RegExp(`^${name}:(.*)$`, 'm').exec(info)?.[1]?.trim();
}

// --- Cluster ------------------------------------------------------------------

export interface RedisClusterOptions {
  /** Default 3, the fewest `redis-cli --cluster create` accepts. */
  masters?: number;
  /** Options of every server (cluster mode is added). */
  node?: RedisNodeOptions;
}

/** One slot range and the server that owns it. */
export interface SlotRange {
  readonly from: number;
  readonly to: number;
  readonly master: RedisNodeProcess;
}

/** The server that owns `slot` among `ranges`. */
export function ownerOfSlot(ranges: readonly SlotRange[], slot: number): RedisNodeProcess {
  const range = ranges.find((r) => r.from <= slot && slot <= r.to);
  if (!range) throw new Error(`no master serves slot ${slot}`);
  return range.master;
}

/**
 * One fresh resource per master among `ranges`, each in a different slot;
 * `keyOf` names a resource's lock key (what decides its slot).
 */
export function spreadOverMasters(
  ranges: readonly SlotRange[],
  keyOf: (resource: string) => string,
  name: string,
): string[] {
  const masters = new Map<RedisNodeProcess, string>();
  for (let i = 0; masters.size < ranges.length; i++) {
    const resource = `${name}:${randomUUID()}:${i}`;
    const master = ownerOfSlot(ranges, hashSlot(keyOf(resource)));
    if (!masters.has(master)) masters.set(master, resource);
  }
  return [...masters.values()];
}

/** A local Redis Cluster. The cluster bus of each server listens on its port + 10000. */
export class RedisClusterProcess {
  private constructor(
    /** The servers, masters first; replicas are appended by addReplica(). */
    readonly nodes: RedisNodeProcess[],
    private readonly nodeOptions: RedisNodeOptions,
  ) {}

  /**
   * Starts the servers, joins them with `redis-cli --cluster create` (no
   * replicas) and resolves once every one of them reports `cluster_state:ok`.
   */
  static async start(options: RedisClusterOptions = {}): Promise<RedisClusterProcess> {
    const { masters = 3, node = {} } = options;
    const nodeOptions: RedisNodeOptions = {
      ...node,
      extraArgs: [
        '--cluster-enabled',
        'yes',
        // Relative to the server's own dir.
        '--cluster-config-file',
        'nodes.conf',
        '--repl-diskless-sync-delay',
        '0',
        ...(node.extraArgs ?? []),
      ],
    };
    const nodes = await startRedisNodes(masters, nodeOptions);
    const cluster = new RedisClusterProcess(nodes, nodeOptions);
    try {
      await redisCli([
        '--cluster',
        'create',
        ...nodes.map((n) => `${n.host}:${n.port}`),
        '--cluster-replicas',
        '0',
        '--cluster-yes',
      ]);
      await cluster.waitUntilOk();
    } catch (error) {
      await cluster.stop();
      throw error;
    }
    return cluster;
  }

  /** The servers as `{ host, port }`, to seed a cluster client. */
  get seeds(): HostPort[] {
    return this.nodes.map(({ host, port }) => ({ host, port }));
  }

  /**
   * Resolves once every server says `cluster_state:ok`. Redis publishes no
   * event when the cluster state changes, so this polls CLUSTER INFO.
   */
  async waitUntilOk(): Promise<void> {
    await pollUntil('the cluster did not reach cluster_state:ok', async () => {
      const infos = await Promise.all(this.nodes.map((n) => n.cli('CLUSTER', 'INFO')));
      return infos.every((info) => field(info, 'cluster_state') === 'ok') ? true : undefined;
    });
  }

  /** Which server owns which slots, from CLUSTER SLOTS. */
  async slotRanges(): Promise<SlotRange[]> {
    const client = new Redis({ host: this.nodes[0].host, port: this.nodes[0].port });
    try {
      const slots = await client.cluster('SLOTS');
      return slots.map(([from, to, [, port]]) => ({
        from,
        to,
        master: this.nodes.find((n) => n.port === port)!,
      }));
    } finally {
      client.disconnect();
    }
  }

  /** The server that owns `slot`. */
  async masterOf(slot: number): Promise<RedisNodeProcess> {
    return ownerOfSlot(await this.slotRanges(), slot);
  }

  /**
   * Starts one more server and makes it a replica of `master`; resolves once
   * the master counts it as connected (no event for that either: polls INFO).
   */
  async addReplica(master: RedisNodeProcess): Promise<RedisNodeProcess> {
    const replica = await RedisNodeProcess.start(this.nodeOptions);
    this.nodes.push(replica);
    const masterId = (await master.cli('CLUSTER', 'MYID')).trim();
    await redisCli([
      '--cluster',
      'add-node',
      `${replica.host}:${replica.port}`,
      `${master.host}:${master.port}`,
      '--cluster-slave',
      '--cluster-master-id',
      masterId,
    ]);
    await pollUntil('the replica did not attach to its master', async () => {
      const info = await master.cli('INFO', 'replication');
      return Number(field(info, 'connected_slaves') ?? 0) > 0 ? true : undefined;
    });
    await this.waitUntilOk();
    return replica;
  }

  async stop(): Promise<void> {
    await stopRedisNodes(this.nodes);
  }
}

// --- Sentinel -----------------------------------------------------------------

export interface RedisSentinelOptions {
  /** The master's name as Sentinel knows it. Default 'mymaster'. */
  name?: string;
}

/** A master, its replica and a Sentinel watching them (quorum 1). */
export class RedisSentinelSetup {
  private constructor(
    readonly name: string,
    /** The servers: the master and the replica at the start (a failover swaps their roles). */
    readonly servers: readonly [RedisNodeProcess, RedisNodeProcess],
    readonly sentinel: RedisNodeProcess,
  ) {}

  static async start(options: RedisSentinelOptions = {}): Promise<RedisSentinelSetup> {
    const name = options.name ?? 'mymaster';
    const started: RedisNodeProcess[] = [];
    try {
      // Without the default 5 s pause before a full sync, in both directions (after a failover too).
      const quickSync = ['--repl-diskless-sync-delay', '0'];
      const master = await RedisNodeProcess.start({ extraArgs: quickSync });
      started.push(master);
      const replica = await RedisNodeProcess.start({
        extraArgs: [...quickSync, '--replicaof', master.host, String(master.port)],
      });
      started.push(replica);
      // WAIT returns once the replica has synced and acknowledged the write: the link is up.
      await master.cli('SET', 'replicated', '1');
      if ((await master.cli('WAIT', 1, 10_000)) !== '1')
        throw new Error('the replica did not sync with its master');
      const sentinel = await RedisNodeProcess.start({
        appendonly: false,
        sentinel: [
          `sentinel monitor ${name} ${master.host} ${master.port} 1`,
          `sentinel down-after-milliseconds ${name} 5000`,
          `sentinel failover-timeout ${name} 10000`,
        ],
      });
      started.push(sentinel);
      return new RedisSentinelSetup(name, [master, replica], sentinel);
    } catch (error) {
      await stopRedisNodes(started);
      throw error;
    }
  }

  /** The Sentinels, as ioredis `sentinels` wants them. */
  get sentinels(): HostPort[] {
    return [{ host: this.sentinel.host, port: this.sentinel.port }];
  }

  /** The current master per Sentinel. */
  async master(): Promise<RedisNodeProcess> {
    const [host, port] = (
      await this.sentinel.cli('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', this.name)
    ).split('\n');
    const server = this.servers.find((s) => s.host === host && s.port === Number(port));
    if (!server) throw new Error(`Sentinel names an unknown master ${host}:${port}`);
    return server;
  }

  /** The server that is not the current master. */
  async replica(): Promise<RedisNodeProcess> {
    const master = await this.master();
    return this.servers.find((s) => s !== master)!;
  }

  /**
   * `SENTINEL FAILOVER`: promotes the replica without asking the master.
   * Resolves with the new master once Sentinel published +switch-master.
   */
  async failover(): Promise<RedisNodeProcess> {
    const events = new Redis({ host: this.sentinel.host, port: this.sentinel.port });
    events.on('error', () => undefined);
    try {
      await events.subscribe('+switch-master');
      const switched = once(events, 'message');
      const admin = new Redis({ host: this.sentinel.host, port: this.sentinel.port });
      try {
        // Sentinel refuses (NOGOODSLAVE) until it has met the replica through the
        // master's INFO and linked to it; nothing announces that link, so ask again.
        await pollUntil('Sentinel found no replica to promote', async () => {
          try {
            return await admin.call('SENTINEL', 'FAILOVER', this.name);
          } catch (error) {
            if (/NOGOODSLAVE/.test((error as Error).message)) return undefined;
            throw error;
          }
        });
      } finally {
        admin.disconnect();
      }
      const [, message] = (await switched) as [string, string];
      // "<name> <old host> <old port> <new host> <new port>"
      const [, , , host, port] = message.split(' ');
      const server = this.servers.find((s) => s.host === host && s.port === Number(port));
      if (!server) throw new Error(`Sentinel switched to an unknown master ${host}:${port}`);
      return server;
    } finally {
      events.disconnect();
    }
  }

  async stop(): Promise<void> {
    await stopRedisNodes([this.sentinel, ...this.servers]);
  }
}
