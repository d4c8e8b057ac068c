import {
  createLock,
  createRedlock,
  IoredisAdapter,
  type Lock,
  type LockHandle,
} from 'redlock-universal';
import {
  AUTO_PIPELINING_SUFFIX,
  closeClients,
  openClients,
  versionOf,
  type Contender,
  type ContenderSession,
  type OpenOptions,
} from './contender.js';

interface Held {
  readonly lock: Lock;
  readonly handle: LockHandle;
}

/**
 * redlock-universal: a lock object per key (`createLock` on one node,
 * `createRedlock` on several), `lock.acquire()` / `lock.release(handle)`.
 *
 * On one node it runs in its documented `performance: 'lean'` mode: the
 * standard SimpleLock PINGs the node on the first acquire of every new lock
 * object (its health check), which with a fresh key per cycle is one extra
 * round trip per lock. In `wait` mode the lock object of the hot key is
 * shared by the workers (each acquire draws its own value).
 */
export function redlockUniversalContender(autoPipelining: boolean): Contender {
  return {
    id: `redlock-universal${autoPipelining ? '+ap' : ''}`,
    label: `redlock-universal ${versionOf('redlock-universal')}${autoPipelining ? AUTO_PIPELINING_SUFFIX : ''}`,
    kind: 'peer',
    canWait: true,
    settings: `1 node: createLock (performance 'lean'), N nodes: createRedlock; try: retryAttempts 0; wait: retryAttempts 10^6, retryDelay 10 ms; clients ${autoPipelining ? 'with' : 'without'} enableAutoPipelining`,
    async open(urls: readonly string[], { mode, ttl }: OpenOptions): Promise<ContenderSession> {
      const clients = await openClients(urls, { autoPipelining });
      const adapters = clients.map((client) => new IoredisAdapter(client));
      const retry =
        mode === 'try'
          ? { retryAttempts: 0, retryDelay: 0 }
          : { retryAttempts: 1_000_000, retryDelay: 10 };
      const create = (key: string): Lock =>
        adapters.length === 1
          ? createLock({ adapter: adapters[0], key, ttl, performance: 'lean', ...retry })
          : createRedlock({ adapters, key, ttl, ...retry });
      const shared = new Map<string, Lock>();
      const lockFor = (key: string): Lock => {
        if (mode === 'try') return create(key);
        let lock = shared.get(key);
        if (!lock) shared.set(key, (lock = create(key)));
        return lock;
      };
      const session: ContenderSession<Held> = {
        acquire: async (key) => {
          const lock = lockFor(key);
          return { lock, handle: await lock.acquire() };
        },
        release: (held) => held.lock.release(held.handle),
        close: () => closeClients(clients),
      };
      return session as ContenderSession;
    },
  };
}
