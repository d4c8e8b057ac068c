import { describeResources } from './describe-resources.js';
/**
 * Every error this package throws is a {@link LockError}; the subclasses tell
 * apart the situations a caller reacts to differently: the resource is busy
 * (try later), the nodes are unreachable (alert someone), the lock was lost
 * (stop writing), or the code asked for something impossible (fix the call).
 */
export class LockError extends Error {
  /** Stable machine-readable code, e.g. `LOCK_BUSY`. */
  readonly code: string = 'LOCK_ERROR';

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/**
 * Another holder has the resource. `retryAfter` is that holder's remaining
 * lease in milliseconds (how long until the lock can be had at the latest,
 * unless the holder extends it), or `undefined` when the nodes did not say.
 */
export class LockBusyError extends LockError {
  override readonly code: string = 'LOCK_BUSY';

  constructor(
    readonly resources: readonly string[],
    readonly retryAfter: number | undefined,
    message?: string,
  ) {
    super(
      message ??
        `${describeResources(resources)} ${resources.length > 1 ? 'are' : 'is'} locked by another holder` +
          (retryAfter === undefined ? '' : `; its lease ends in ${retryAfter} ms`) +
          '. Retry later, or acquire with a wait (retry options) instead of a single attempt.',
    );
  }
}

/**
 * Gave up waiting: every attempt found the resource held until the retry
 * budget or the wait deadline ran out. A {@link LockBusyError}, so one
 * `instanceof LockBusyError` check covers "busy now" and "busy for too long".
 */
export class LockTimeoutError extends LockBusyError {
  override readonly code = 'LOCK_TIMEOUT';

  constructor(
    resources: readonly string[],
    retryAfter: number | undefined,
    readonly attempts: number,
    readonly waited: number,
  ) {
    super(
      resources,
      retryAfter,
      `Gave up waiting for ${describeResources(resources)} after ${attempts} attempt${attempts === 1 ? '' : 's'} ` +
        `in ${Math.round(waited)} ms: it stayed locked by another holder` +
        (retryAfter === undefined ? '' : ` (lease ends in ${retryAfter} ms)`) +
        '. Raise waitTimeout or retry.attempts, or shorten what runs under the lock.',
    );
  }
}

/** What one node answered when it did not grant, extend or release. */
export interface NodeFailure {
  /** `host:port` (or the name given to a user-owned client). */
  readonly node: string;
  readonly error: Error;
}

/**
 * Not enough nodes answered in time for a quorum: the lock state is unknown
 * and nothing was granted. Distinct from busy: this is an outage to alert on.
 */
export class LockUnavailableError extends LockError {
  override readonly code: string = 'LOCK_UNAVAILABLE';

  constructor(
    readonly resources: readonly string[],
    readonly failures: readonly NodeFailure[],
    readonly quorum: number,
    readonly nodeCount: number,
    what = 'lock',
    message?: string,
  ) {
    super(
      message ??
        `Could not ${what} ${describeResources(resources)}: ${quorum} of ${nodeCount} Redis node${nodeCount === 1 ? '' : 's'} must answer, ` +
          `but ${failures.length} failed (${failures.map((f) => `${f.node}: ${f.error.message}`).join('; ')}). ` +
          adviceFor(failures),
      { cause: failures[0]?.error },
    );
  }
}

/**
 * The engine is shutting down (`close()`, or the application's shutdown
 * hooks): it takes no new locks, and callers waiting for one stop waiting.
 * A {@link LockUnavailableError}, so it is answered as one (503): another
 * instance can serve the request.
 */
export class LockClosingError extends LockUnavailableError {
  override readonly code = 'LOCK_CLOSING';

  constructor(resources: readonly string[]) {
    super(
      resources,
      [],
      0,
      0,
      'lock',
      `Could not lock ${describeResources(resources)}: this instance is shutting down and takes no new locks. ` +
        'Send the request to another instance, or retry once this one has restarted.',
    );
  }
}

/**
 * The lock is no longer held: its lease ran out before an extension
 * succeeded, or the nodes said another value holds the key. Work done under
 * it from now on is unprotected; fenced writes with its token will be refused
 * once another holder has written.
 */
export class LockLostError extends LockError {
  override readonly code = 'LOCK_LOST';

  constructor(
    readonly resources: readonly string[],
    reason: string,
  ) {
    super(
      `Lost the lock on ${describeResources(resources)}: ${reason}. ` +
        'Stop the work it protects; use a longer ttl or keep automatic extension on if the work outlives the lease.',
    );
  }
}

/** The caller's AbortSignal fired while waiting for the lock. */
export class LockAbortedError extends LockError {
  override readonly code = 'LOCK_ABORTED';

  constructor(resources: readonly string[], reason: unknown) {
    super(
      `Stopped waiting for ${describeResources(resources)}: the caller's AbortSignal was aborted.`,
      {
        cause: reason,
      },
    );
  }
}

/** Options or arguments that cannot work; the message says what to change. */
export class LockOptionsError extends LockError {
  override readonly code: string = 'LOCK_INVALID_OPTIONS';
}

/**
 * A node's set-up breaks an assumption the lock relies on (see "Fencing
 * assumptions" in docs/fencing.md), raised at connect time when `strict` is on.
 */
export class LockConfigurationError extends LockError {
  override readonly code = 'LOCK_UNSAFE_CONFIGURATION';
}

/** What to do about node failures, from what kind they are. */
function adviceFor(failures: readonly NodeFailure[]): string {
  const advice = new Set<string>();
  for (const { error } of failures) {
    if (error.message.startsWith('no answer within')) {
      advice.add('Raise nodeTimeout if the nodes are only slow, or look at the ones that hang.');
    } else if (error.message.startsWith('granted, but not counted toward the quorum')) {
      // They answered: a restart without proof of persistence keeps them out for a while.
      advice.add(
        'Those nodes answered but restarted without proof that they kept their data, so they count again only once every lease they may have forgotten has ended: ' +
          'retry then, or run them with appendonly yes and appendfsync always.',
      );
    } else if (error.name === 'ReplyError' || /^[A-Z]{3,}\b/.test(error.message)) {
      advice.add(
        'The nodes refused the command: fix what their replies say (permissions, data under our keys).',
      );
    } else {
      advice.add(
        'Check that the nodes are running and reachable (address, TLS settings, credentials).',
      );
    }
  }
  return [...advice].join(' ');
}
