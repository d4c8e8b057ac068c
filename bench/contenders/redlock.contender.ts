import Redlock, { type Lock as RedlockLock } from 'redlock';
import { Redlock as SesameRedlock, type Lock as SesameLock } from '@sesamecare-oss/redlock';
import { peerContender, type Contender, type PeerConfig } from './contender.js';

/**
 * Tuned settings per mode. `try`: a single attempt (retryCount 0). `wait`:
 * retry without a limit every 10 ms ±5 ms, like redis-semaphore's default
 * interval.
 */
const TUNED_TRY = { retryCount: 0 };
const TUNED_WAIT = { retryCount: -1, retryDelay: 10, retryJitter: 5 };

type Flavour = 'redlock' | '@sesamecare-oss/redlock';

/**
 * node-redlock 5.0.0-beta.2 and its maintained fork @sesamecare-oss/redlock:
 * the same API (`acquire([key], ttl)`, `lock.release()`), one ioredis client per node.
 *
 * `defaults`: `new Redlock(clients)` on plain clients, as the README starts:
 * retryCount 10, retryDelay 200 ms, retryJitter 100 ms (the code's defaults;
 * the README's example spells out the same values with a 200 ms jitter), so
 * a waiter gives up after about 2 s. `tuned`: auto-pipelining clients and
 * the settings above.
 */
export function redlockContender(flavour: Flavour, config: PeerConfig): Contender {
  return peerContender<RedlockLock | SesameLock>(config, {
    name: flavour,
    settings: {
      tuned:
        'try: retryCount 0; wait: retryCount -1 (unbounded), retryDelay 10 ms, retryJitter 5 ms; clients with enableAutoPipelining',
      defaults:
        'library defaults (retryCount 10, retryDelay 200 ms, retryJitter 100 ms); plain clients',
    },
    cycle(clients, { mode, ttl, tuned }) {
      const settings = !tuned ? {} : mode === 'try' ? TUNED_TRY : TUNED_WAIT;
      const redlock =
        flavour === 'redlock'
          ? new Redlock(clients, settings)
          : new SesameRedlock(clients, settings);
      return {
        acquire: (key) => redlock.acquire([key], ttl),
        release: (lock) => lock.release(),
      };
    },
  });
}
