import type { Lock, ReleaseResult } from './lock.js';
import type { LockError, LockLostError } from './lock-errors.js';

/**
 * The engine's events, for logs, metrics and tests. Emitting costs nothing
 * while nobody listens: the payload is only built when a listener exists.
 *
 * @example
 * engine.on('contended', (e) => metrics.increment('lock.contended', { resource: e.resources[0] }));
 */
export interface LockEvents {
  /** A lock was granted; `waited` is ms since the first attempt. */
  acquired: [event: { lock: Lock; attempts: number; waited: number }];
  /** An attempt found the resource held by someone else and will retry. */
  contended: [
    event: { resources: readonly string[]; attempt: number; retryAfter: number | undefined },
  ];
  /** An acquisition gave up (busy for too long, nodes unreachable, aborted). */
  failed: [event: { resources: readonly string[]; attempts: number; error: LockError }];
  /** A lease was renewed; `duration` is the ms the extension took. */
  extended: [event: { lock: Lock; duration: number }];
  /** A lock was lost: its lease ran out or another value took its keys. */
  lost: [event: { lock: Lock; error: LockLostError }];
  /** A lock was released; `held` is ms since it was granted. */
  released: [event: { lock: Lock; result: ReleaseResult; held: number }];
}
