import type { Contender, PeerConfig } from './contender.js';
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
    'defaults: owns its clients (no auto-pipelining: the lock scripts of one turn go out as one BATCH command per node), fencing on, nodeTimeout ttl/10; try: tryAcquire(); wait: acquire() with the default retry (10 ms ×5 up to 200 ms, ±50 %)',
});

export const OURS_AP_CLIENTS = oursContender({
  id: 'ours-ap',
  label: 'ours, auto-pipelining clients',
  autoPipeliningClients: true,
  settings:
    'given ioredis clients with enableAutoPipelining, to show what the engine’s own batching leaves to the pipelining',
});

/** One engine per hand-off worker: wake-ups come through Redis pub/sub, not the in-process queue. */
export const OURS_ENGINE_PER_WORKER = oursContender({
  id: 'ours-engines',
  label: 'ours, one engine per worker',
  engines: 8,
  settings:
    'defaults, but each hand-off worker has an engine of its own (own connections, wait queue and subscriptions), as if each ran in its own process: a release reaches the other workers only through the nodes’ pub/sub message',
});

export const OURS_NO_FENCING = oursContender({
  id: 'ours-nofence',
  label: 'ours, fencing off',
  fencing: false,
  settings: 'fencing: false (no INCR of the node’s fence counter)',
});

export const IN_PROCESS_MUTEX = inProcessMutexContender();
export const RAW = rawFloorContender(false);
export const RAW_AP = rawFloorContender(true);
/** The engine's own scripts sent by hand: the protocol's cost without the engine's code. */
export const RAW_SCRIPTS = rawFloorContender(false, true);

/**
 * The peers in one configuration: `defaults` (plain clients, the README's
 * settings) or `tuned` (auto-pipelining clients, 10 ms retries).
 */
export function peers(config: PeerConfig): Contender[] {
  return [
    redlockContender('redlock', config),
    redlockContender('@sesamecare-oss/redlock', config),
    redlockUniversalContender(config),
    redisSemaphoreContender(config),
  ];
}

/** Each peer in its default configuration, then tuned. */
export function peersBothWays(): Contender[] {
  const tuned = peers('tuned');
  return peers('defaults').flatMap((peer, i) => [peer, tuned[i]]);
}

/** The hand-off's contenders that a worker process can open by id (see handoff-processes.ts). */
export function waitingContender(id: string): Contender {
  const found = [OURS, ...peersBothWays()].find((c) => c.id === id && c.canWait);
  if (!found) throw new Error(`no contender '${id}' that can wait for a lock`);
  return found;
}
