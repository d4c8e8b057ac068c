import { Redis, type RedisOptions } from 'ioredis';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';

/**
 * `try`: one attempt, no retries (the uncontended cycle).
 * `wait`: wait for a busy lock with the library's own retry (the hand-off).
 */
export type AcquireMode = 'try' | 'wait';

/** One library's lock cycle on one set of nodes, with clients of its own. */
export interface ContenderSession<H = unknown> {
  /**
   * Takes the lock on `key`; rejects when it cannot be had (after retries in
   * `wait` mode). `worker` numbers the caller (the hand-off passes it), for
   * contenders that give each caller a client set of its own.
   */
  acquire(key: string, worker?: number): Promise<H>;
  release(handle: H, key: string): Promise<unknown>;
  /** Closes the clients this session opened. */
  close(): Promise<void>;
}

export interface OpenOptions {
  readonly mode: AcquireMode;
  /** Lease in ms. */
  readonly ttl: number;
}

export type PeerConfig = 'defaults' | 'tuned';

/** A library (or a raw floor) as the bench drives it. */
export interface Contender {
  /** Stable id, used in the JSON results and the chart legend. */
  readonly id: string;
  /** Name in the tables. */
  readonly label: string;
  readonly kind: 'ours' | 'peer' | 'floor';
  /**
   * Peers only: `defaults`, set up as the library's README shows it (plain
   * ioredis clients, default options), or `tuned`, set up for speed
   * (auto-pipelining clients, 10 ms retries, no extras).
   */
  readonly config?: PeerConfig;
  /** Supports `wait` mode (retries until the lock is free). */
  readonly canWait: boolean;
  /** How it was set up, for the notes under the tables. */
  readonly settings: string;
  open(urls: readonly string[], options: OpenOptions): Promise<ContenderSession>;
}

const require = createRequire(import.meta.url);

/**
 * The installed version of a package, read from its package.json on disk
 * (some packages' "exports" do not expose it to require).
 */
export function versionOf(name: string): string {
  for (const dir of require.resolve.paths(name) ?? []) {
    try {
      const { version } = JSON.parse(readFileSync(join(dir, name, 'package.json'), 'utf8')) as {
        version: string;
      };
      return String(version).replace(/^v/, '');
    } catch {
      // not in this node_modules
    }
  }
  return '?';
}

/**
 * Fresh, connected ioredis clients, one per node. Plain defaults except
 * `enableAutoPipelining` where asked: the settings a user of that library
 * would pass.
 */
export async function openClients(
  urls: readonly string[],
  options: { autoPipelining: boolean },
): Promise<Redis[]> {
  const clientOptions: RedisOptions = {
    lazyConnect: true,
    enableAutoPipelining: options.autoPipelining,
  };
  const clients = urls.map((url) => {
    const client = new Redis(url, clientOptions);
    // Failures surface as rejected commands; without a listener ioredis also prints each one.
    client.on('error', () => undefined);
    return client;
  });
  try {
    await Promise.all(clients.map((client) => client.connect()));
  } catch (error) {
    closeClients(clients).catch(() => undefined);
    throw error;
  }
  return clients;
}

export async function closeClients(clients: readonly Redis[]): Promise<void> {
  await Promise.all(
    clients.map((client) =>
      client.status === 'ready'
        ? client.quit().then(
            () => undefined,
            () => client.disconnect(),
          )
        : client.disconnect(),
    ),
  );
}

export const AUTO_PIPELINING_SUFFIX = ' +AP';

/** Label suffixes of the two peer configurations. */
export const PEER_SUFFIX: Record<PeerConfig, string> = {
  defaults: ' · defaults',
  tuned: ` · tuned${AUTO_PIPELINING_SUFFIX}`,
};

/** A peer's id and label in a configuration. */
export function peerNaming(
  name: string,
  config: PeerConfig,
): { id: string; label: string; config: PeerConfig } {
  return {
    id: `${name}${config === 'tuned' ? '+tuned' : ''}`,
    label: `${name} ${versionOf(name)}${PEER_SUFFIX[config]}`,
    config,
  };
}

/** What sets one peer apart: its name, its settings and its lock cycle. */
export interface PeerSpec<H> {
  /** The npm package: its id, and its label with the installed version. */
  readonly name: string;
  /** The `settings` note for each configuration. */
  readonly settings: Readonly<Record<PeerConfig, string>>;
  /**
   * Its acquire and release on `clients`, fresh ones opened for the session
   * (auto-pipelining when `tuned`) and closed with it.
   */
  cycle(
    clients: Redis[],
    options: OpenOptions & { readonly tuned: boolean },
  ): Pick<ContenderSession<H>, 'acquire' | 'release'>;
}

/** A peer library in a configuration: it waits with its own retry, on clients of its own. */
export function peerContender<H>(config: PeerConfig, spec: PeerSpec<H>): Contender {
  const tuned = config === 'tuned';
  return {
    ...peerNaming(spec.name, config),
    kind: 'peer',
    canWait: true,
    settings: spec.settings[config],
    async open(urls: readonly string[], options: OpenOptions): Promise<ContenderSession> {
      const clients = await openClients(urls, { autoPipelining: tuned });
      const session: ContenderSession<H> = {
        ...spec.cycle(clients, { ...options, tuned }),
        close: () => closeClients(clients),
      };
      return session as ContenderSession;
    },
  };
}
