import type { Contender } from './contender.js';
import { inProcessMutexContender } from './in-process-mutex.contender.js';
import { oursContender } from './ours.contender.js';
import { rawFloorContender } from './raw-floor.contender.js';
import { redisSemaphoreContender } from './redis-semaphore.contender.js';
import { redlockUniversalContender } from './redlock-universal.contender.js';
import { redlockContender } from './redlock.contender.js';

export * from './contender.js';
export { engineWarnings, oursContender } from './ours.contender.js';

export const OURS = oursContender({
  id: 'ours',
  label: 'ours (LockEngine)',
  settings:
    'defaults: owns its clients (auto-pipelining), fencing on, nodeTimeout ttl/10; try: tryAcquire(); wait: acquire() with the default retry (10 ms ×5 up to 200 ms, ±50 %)',
});

export const OURS_PLAIN_CLIENTS = oursContender({
  id: 'ours-plain',
  label: 'ours, plain clients',
  plainClients: true,
  settings:
    'given plain ioredis clients (no auto-pipelining), to separate the engine from the pipelining',
});

export const OURS_CONSTANT_RETRY = oursContender({
  id: 'ours-const10',
  label: 'ours, retry 10 ms const',
  retry: { delay: 10, factor: 1, maxDelay: 10, jitter: 0.5 },
  settings:
    'acquire() with retry { delay: 10, factor: 1, maxDelay: 10, jitter: 0.5 }: the peers’ cadence',
});

export const OURS_NO_FENCING = oursContender({
  id: 'ours-nofence',
  label: 'ours, fencing off',
  fencing: false,
  settings: 'fencing: false (no INCR, no fence key per resource)',
});

export const IN_PROCESS_MUTEX = inProcessMutexContender();
export const RAW = rawFloorContender(false);
export const RAW_AP = rawFloorContender(true);

/** The peers, each with plain clients and with auto-pipelining clients. */
export function peers(autoPipelining: boolean): Contender[] {
  return [
    redlockContender('redlock', autoPipelining),
    redlockContender('@sesamecare-oss/redlock', autoPipelining),
    redlockUniversalContender(autoPipelining),
    redisSemaphoreContender(autoPipelining),
  ];
}
