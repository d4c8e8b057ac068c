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
  // A node that is down when the engine closes must not keep the process alive.
  disconnectTimeout: 200,
  retryStrategy: (times) => Math.min(50 * 2 ** Math.min(times, 5), 1000),
};

/** One independent Redis node as the engine sees it. */
export class LockNode {
  /** `host:port` (without credentials), used in messages and logs. */
  readonly label: string;
  /** The connection's last error, to say why a node that is not ready failed. */
  private lastError: Error | undefined;

  private constructor(
    readonly client: Redis,
    /** True when the engine opened the client and must close it. */
    readonly owned: boolean,
  ) {
    const { host, port, path } = client.options;
    this.label = path ?? `${host ?? 'localhost'}:${port ?? 6379}`;
    client.on('error', (error: Error) => (this.lastError = error));
    client.on('ready', () => (this.lastError = undefined));
  }

  static from(spec: LockNodeSpec): LockNode {
    if (isRedisClient(spec)) return new LockNode(spec, false);
    const client =
      typeof spec === 'string'
        ? new Redis(spec, OWNED_CLIENT_DEFAULTS)
        : new Redis({ ...OWNED_CLIENT_DEFAULTS, ...(spec as RedisOptions) });
    return new LockNode(client, true);
  }

  /**
   * Opens a lazy client (the engine's or the caller's); resolves true once it
   * is ready, false if it could not connect in time or was refused for good
   * (wrong password, missing permissions): see {@link connectionError}.
   */
  async connect(timeoutMs: number): Promise<boolean> {
    const { client } = this;
    if (client.status === 'ready') return true;
    if (client.status === 'wait') client.connect().catch(() => undefined);
    return new Promise<boolean>((resolve) => {
      const done = (ready: boolean) => {
        clearTimeout(timer);
        client.off('ready', onReady);
        client.off('error', onError);
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
    });
  }

  /** Why the node is not ready, when it is not. */
  get connectionError(): Error | undefined {
    return this.client.status === 'ready' ? undefined : this.lastError;
  }

  /** Runs a script by SHA; after SCRIPT FLUSH or a restart, by source (which caches it again). */
  run(
    script: LuaScript,
    keys: readonly string[],
    args: readonly (string | number)[],
  ): Promise<unknown> {
    if (this.client.status !== 'ready' && this.lastError && this.owned) {
      return Promise.reject(new Error(`not connected (${this.lastError.message})`));
    }
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
    if (client.status !== 'ready') {
      // Connecting or reconnecting: nothing to say goodbye to, and no 'end' to wait for.
      client.disconnect();
      return;
    }
    // QUIT resolves on the server's OK; the socket closes a moment later.
    const ended = once(client, 'end');
    await client.quit().catch(() => client.disconnect());
    // Bounded, should the socket never report its end.
    await Promise.race([ended, sleep(1000, undefined, { ref: false })]);
  }
}

/** Errors a reconnect will not cure: the server refuses these credentials. */
function isRefusal(error: Error): boolean {
  return /^(WRONGPASS|NOAUTH|NOPERM)/.test(error.message);
}
