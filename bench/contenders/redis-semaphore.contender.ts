import { Mutex, RedlockMutex } from 'redis-semaphore';
import { peerContender, type Contender, type PeerConfig } from './contender.js';

/**
 * redis-semaphore: `Mutex` on one node, `RedlockMutex` on several; one mutex
 * object per acquisition (its identifier is per object, so objects are not
 * shared between concurrent holders).
 *
 * `defaults`: plain clients and the README's defaults: retryInterval 10 ms,
 * acquireTimeout 10 s, auto-refresh every 0.8 × lockTimeout (a timer per held
 * lock). `tuned`: auto-pipelining clients, auto-refresh off
 * (`refreshInterval: 0`, as no other peer extends in this cycle), one
 * attempt in `try` mode, a 60 s acquireTimeout in `wait` mode.
 */
export function redisSemaphoreContender(config: PeerConfig): Contender {
  return peerContender<Mutex | RedlockMutex>(config, {
    name: 'redis-semaphore',
    settings: {
      tuned:
        '1 node: Mutex, N nodes: RedlockMutex; refreshInterval 0; try: acquireAttemptsLimit 1; wait: retryInterval 10 ms (its default), acquireTimeout 60 s; clients with enableAutoPipelining',
      defaults:
        '1 node: Mutex, N nodes: RedlockMutex, library defaults (retryInterval 10 ms, acquireTimeout 10 s, auto-refresh every 0.8 × lockTimeout); plain clients',
    },
    cycle(clients, { mode, ttl, tuned }) {
      const options = !tuned
        ? { lockTimeout: ttl }
        : mode === 'try'
          ? { lockTimeout: ttl, refreshInterval: 0, acquireAttemptsLimit: 1 }
          : { lockTimeout: ttl, refreshInterval: 0, retryInterval: 10, acquireTimeout: 60_000 };
      return {
        acquire: async (key) => {
          const mutex =
            clients.length === 1
              ? new Mutex(clients[0], key, options)
              : new RedlockMutex(clients, key, options);
          await mutex.acquire();
          return mutex;
        },
        release: (mutex) => mutex.release(),
      };
    },
  });
}
