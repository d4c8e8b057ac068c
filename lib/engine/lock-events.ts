import type { Lock, ReleaseResult } from './lock.js';
import type { LockError, LockLostError } from './lock-errors.js';
import type { NodeRestart } from './node-restarts.js';

/**
 * How the nodes answered one round of an acquisition, extension or release.
 * A round ends as soon as its outcome is decided, so the counts may add up to
 * fewer than the nodes: the rest were not waited for.
 */
export interface NodeResults {
  /** Nodes that granted the lock, renewed its lease or deleted it. */
  readonly granted: number;
  /** Nodes that said no: another holder has the key, or it is no longer ours. */
  readonly denied: number;
  /** Nodes that failed or did not answer in time. */
  readonly failed: number;
}

/**
 * The engine's events, for logs, metrics and tests. Emitting costs nothing
 * while nobody listens: the payload is only built when a listener exists.
 * Durations are milliseconds; a lock's resources and fencing token are on
 * `lock` (`lock.resources`, `lock.token`).
 *
 * @example
 * engine.on('contended', (e) => metrics.increment('lock.contended', { resource: e.resources[0] }));
 */
export interface LockEvents {
  /** A lock was granted; `waited` is ms since the first attempt. */
  acquired: [event: { lock: Lock; attempts: number; waited: number; nodes: NodeResults }];
  /** An attempt found the resource held by someone else and will retry. */
  contended: [
    event: {
      resources: readonly string[];
      attempt: number;
      retryAfter: number | undefined;
      nodes: NodeResults;
    },
  ];
  /**
   * An acquisition that had to wait (it retried, or lined up behind callers of
   * this process) stopped waiting: just before its `acquired` or `failed`.
   */
  waited: [
    event: { resources: readonly string[]; attempts: number; waited: number; acquired: boolean },
  ];
  /**
   * An acquisition gave up (busy for too long, nodes unreachable, aborted).
   * `nodes`: how the last attempt's round went, when it got that far.
   */
  failed: [
    event: {
      resources: readonly string[];
      attempts: number;
      waited: number;
      error: LockError;
      nodes: NodeResults | undefined;
    },
  ];
  /**
   * A lease was renewed; `ttl` is the lease in ms it set (the lock's own, or
   * the one given to `extend()`), `duration` the ms the extension took.
   */
  extended: [event: { lock: Lock; ttl: number; duration: number; nodes: NodeResults }];
  /** A lock was lost: its lease ran out or another value took its keys. `held`: ms since the grant. */
  lost: [event: { lock: Lock; error: LockLostError; held: number }];
  /**
   * A node came back as a new server process. Without proof that it kept its
   * data (appendonly yes, appendfsync always), its grants do not count toward
   * a quorum for `excludedFor` ms: the longest lease it may have forgotten.
   */
  nodeRestarted: [event: NodeRestart];
  /**
   * A lock was released; `held` is ms since it was granted, `duration` the ms
   * the release took.
   */
  released: [
    event: {
      lock: Lock;
      result: ReleaseResult;
      held: number;
      duration: number;
      nodes: NodeResults;
    },
  ];
}
