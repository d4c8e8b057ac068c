import { Mutex, RedlockMutex } from 'redis-semaphore';
import {
  AUTO_PIPELINING_SUFFIX,
  closeClients,
  openClients,
  versionOf,
  type Contender,
  type ContenderSession,
  type OpenOptions,
} from './contender.js';

type AnyMutex = Mutex | RedlockMutex;

/**
 * redis-semaphore: `Mutex` on one node, `RedlockMutex` on several; one mutex
 * object per acquisition (its identifier is per object, so objects are not
 * shared between concurrent holders). Auto-refresh is off
 * (`refreshInterval: 0`), as no other contender extends in this cycle.
 */
export function redisSemaphoreContender(autoPipelining: boolean): Contender {
  return {
    id: `redis-semaphore${autoPipelining ? '+ap' : ''}`,
    label: `redis-semaphore ${versionOf('redis-semaphore')}${autoPipelining ? AUTO_PIPELINING_SUFFIX : ''}`,
    kind: 'peer',
    canWait: true,
    settings: `1 node: Mutex, N nodes: RedlockMutex; refreshInterval 0; try: acquireAttemptsLimit 1; wait: retryInterval 10 ms (its default), acquireTimeout 60 s; clients ${autoPipelining ? 'with' : 'without'} enableAutoPipelining`,
    async open(urls: readonly string[], { mode, ttl }: OpenOptions): Promise<ContenderSession> {
      const clients = await openClients(urls, { autoPipelining });
      const options =
        mode === 'try'
          ? { lockTimeout: ttl, refreshInterval: 0, acquireAttemptsLimit: 1 }
          : { lockTimeout: ttl, refreshInterval: 0, retryInterval: 10, acquireTimeout: 60_000 };
      const session: ContenderSession<AnyMutex> = {
        acquire: async (key) => {
          const mutex =
            clients.length === 1
              ? new Mutex(clients[0], key, options)
              : new RedlockMutex(clients, key, options);
          await mutex.acquire();
          return mutex;
        },
        release: (mutex) => mutex.release(),
        close: () => closeClients(clients),
      };
      return session as ContenderSession;
    },
  };
}
