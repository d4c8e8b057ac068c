import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis, type RedisOptions } from 'ioredis';
import type { LuaScript } from './lua-scripts.js';
import { isRedisClient, type LockNodeSpec } from './lock-options.js';

/**
 * Options for the clients the engine opens itself. Commands fail at once
 * while a node is disconnected instead of queueing: a lock attempt must count
 * that node as down, not wait for it. Auto-pipelining batches the commands
 * of concurrent callers into one write per node and tick.
 */
const OWNED_CLIENT_DEFAULTS: RedisOptions = {
  lazyConnect: true,
  enableOfflineQueue: false,
  enableAutoPipelining: true,
  maxRetriesPerRequest: 0,
  autoResendUnfulfilledCommands: false,
  connectTimeout: 2000,
  retryStrategy: (times) => Math.min(50 * 2 ** Math.min(times, 5), 1000),
};

/** One independent Redis node as the engine sees it. */
export class LockNode {
  /** `host:port` (without credentials), used in messages and logs. */
  readonly label: string;

  private constructor(
    readonly client: Redis,
    /** True when the engine opened the client and must close it. */
    readonly owned: boolean,
  ) {
    const { host, port, path } = client.options;
    this.label = path ?? `${host ?? 'localhost'}:${port ?? 6379}`;
  }

  static from(spec: LockNodeSpec): LockNode {
    if (isRedisClient(spec)) return new LockNode(spec, false);
    const client =
      typeof spec === 'string'
        ? new Redis(spec, OWNED_CLIENT_DEFAULTS)
        : new Redis({ ...OWNED_CLIENT_DEFAULTS, ...(spec as RedisOptions) });
    // A node that is down must not crash the process through an unhandled
    // 'error' event; its failures surface as failed lock attempts instead.
    client.on('error', () => undefined);
    return new LockNode(client, true);
  }

  /** Opens an owned lazy client; resolves true once it is ready, false if it could not connect. */
  async connect(timeoutMs: number): Promise<boolean> {
    const { client } = this;
    if (client.status === 'ready') return true;
    if (this.owned && client.status === 'wait') client.connect().catch(() => undefined);
    return new Promise<boolean>((resolve) => {
      const done = (ready: boolean) => {
        clearTimeout(timer);
        client.off('ready', onReady);
        resolve(ready);
      };
      const onReady = () => done(true);
      const timer = setTimeout(() => done(client.status === 'ready'), timeoutMs);
      client.on('ready', onReady);
    });
  }

  /** Runs a script by SHA; after SCRIPT FLUSH or a restart, by source (which caches it again). */
  run(
    script: LuaScript,
    keys: readonly string[],
    args: readonly (string | number)[],
  ): Promise<unknown> {
    return this.client
      .evalsha(script.sha, keys.length, ...keys, ...args)
      .catch((error: unknown) => {
        if (error instanceof Error && error.message.startsWith('NOSCRIPT')) {
          return this.client.eval(script.source, keys.length, ...keys, ...args);
        }
        throw error;
      });
  }

  async close(): Promise<void> {
    const { client } = this;
    if (!this.owned || client.status === 'end') return;
    // QUIT resolves on the server's OK; the socket closes a moment later.
    const ended = once(client, 'end');
    if (client.status === 'ready') {
      await client.quit().catch(() => client.disconnect());
    } else {
      client.disconnect();
    }
    // Bounded, should a client in an odd state never report its end.
    await Promise.race([ended, sleep(1000, undefined, { ref: false })]);
  }
}
