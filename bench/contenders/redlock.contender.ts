import Redlock, { type Lock as RedlockLock } from 'redlock';
import { Redlock as SesameRedlock, type Lock as SesameLock } from '@sesamecare-oss/redlock';
import {
  AUTO_PIPELINING_SUFFIX,
  closeClients,
  openClients,
  versionOf,
  type Contender,
  type ContenderSession,
  type OpenOptions,
} from './contender.js';

/**
 * Settings per mode. `try`: a single attempt (retryCount 0). `wait`: retry
 * without a limit every 10 ms ±5 ms, like redis-semaphore's default interval
 * (the defaults, 200 ms ±100 ms for at most 10 retries, would mostly measure
 * sleeping).
 */
const TRY = { retryCount: 0 };
const WAIT = { retryCount: -1, retryDelay: 10, retryJitter: 5 };

type Flavour = 'redlock' | '@sesamecare-oss/redlock';

/**
 * node-redlock 5.0.0-beta.2 and its maintained fork @sesamecare-oss/redlock:
 * the same API (`acquire([key], ttl)`, `lock.release()`), one ioredis client per node.
 */
export function redlockContender(flavour: Flavour, autoPipelining: boolean): Contender {
  return {
    id: `${flavour}${autoPipelining ? '+ap' : ''}`,
    label: `${flavour} ${versionOf(flavour)}${autoPipelining ? AUTO_PIPELINING_SUFFIX : ''}`,
    kind: 'peer',
    canWait: true,
    settings: `try: retryCount 0; wait: retryCount -1 (unbounded), retryDelay 10 ms, retryJitter 5 ms; clients ${autoPipelining ? 'with' : 'without'} enableAutoPipelining`,
    async open(urls: readonly string[], { mode, ttl }: OpenOptions): Promise<ContenderSession> {
      const clients = await openClients(urls, { autoPipelining });
      const settings = mode === 'try' ? TRY : WAIT;
      const redlock =
        flavour === 'redlock'
          ? new Redlock(clients, settings)
          : new SesameRedlock(clients, settings);
      const session: ContenderSession<RedlockLock | SesameLock> = {
        acquire: (key) => redlock.acquire([key], ttl),
        release: (lock) => lock.release(),
        close: () => closeClients(clients),
      };
      return session as ContenderSession;
    },
  };
}
