import {
  createLock,
  createRedlock,
  IoredisAdapter,
  type Lock,
  type LockHandle,
} from 'redlock-universal';
import { peerContender, type Contender, type PeerConfig } from './contender.js';

interface Held {
  readonly lock: Lock;
  readonly handle: LockHandle;
}

/**
 * redlock-universal: a lock object per key (`createLock` on one node,
 * `createRedlock` on several), `lock.acquire()` / `lock.release(handle)`.
 *
 * `defaults`: plain clients and the README's defaults: on one node the
 * `standard` performance mode, whose SimpleLock PINGs the node on the first
 * acquire of every new lock object (its health check; with a fresh key per
 * cycle that is one extra round trip per lock), and retryAttempts 3 with a
 * retryDelay of 100 ms (200 ms on several nodes), after which a waiter gives
 * up. `tuned`: auto-pipelining clients, the documented `performance: 'lean'`
 * mode on one node, and unbounded 10 ms retries.
 *
 * In `wait` mode the lock object of the hot key is shared by the workers
 * (each acquire draws its own value).
 */
export function redlockUniversalContender(config: PeerConfig): Contender {
  return peerContender<Held>(config, {
    name: 'redlock-universal',
    settings: {
      tuned:
        "1 node: createLock (performance 'lean'), N nodes: createRedlock; try: retryAttempts 0; wait: retryAttempts 10^6, retryDelay 10 ms; clients with enableAutoPipelining",
      defaults:
        "1 node: createLock, N nodes: createRedlock, library defaults (performance 'standard', retryAttempts 3, retryDelay 100 ms on 1 node / 200 ms on N); plain clients",
    },
    cycle(clients, { mode, ttl, tuned }) {
      const adapters = clients.map((client) => new IoredisAdapter(client));
      const retry = !tuned
        ? {}
        : mode === 'try'
          ? { retryAttempts: 0, retryDelay: 0 }
          : { retryAttempts: 1_000_000, retryDelay: 10 };
      const create = (key: string): Lock =>
        adapters.length === 1
          ? createLock({
              adapter: adapters[0],
              key,
              ttl,
              ...(tuned ? { performance: 'lean' as const } : {}),
              ...retry,
            })
          : createRedlock({ adapters, key, ttl, ...retry });
      const shared = new Map<string, Lock>();
      const lockFor = (key: string): Lock => {
        if (mode === 'try') return create(key);
        let lock = shared.get(key);
        if (!lock) shared.set(key, (lock = create(key)));
        return lock;
      };
      return {
        acquire: async (key) => {
          const lock = lockFor(key);
          return { lock, handle: await lock.acquire() };
        },
        release: (held) => held.lock.release(held.handle),
      };
    },
  });
}
