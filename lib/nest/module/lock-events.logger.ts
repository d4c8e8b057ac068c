import {
  LockBusyError,
  LockAbortedError,
  LockClosingError,
  LockConfigurationError,
  LockOptionsError,
  LockUnavailableError,
  describeResources,
  type Lock,
  type LockEngine,
  type LockLogger,
} from '../../engine/internal.js';
import { markLogged } from '../context/lock-failures.js';
import type {} from '../scheduling/skipped-run.event.js';

/**
 * What the module logs about locks as they are used (start-up checks and
 * releases that missed a node are always warned about):
 * - `'warn'`: lost locks (warn), acquisitions that failed because the
 *   nodes did not answer or are set up unsafely (error), and the first
 *   acquisition refused because the engine shuts down (warn);
 * - `'debug'`: also one debug line per acquisition, contention, extension,
 *   release, busy or aborted acquisition, and skipped run of a scheduled job;
 * - `false`: none of these.
 */
export type LockLogging = 'debug' | 'warn' | false;

const LEVELS: readonly unknown[] = ['debug', 'warn', false];

/** Validates the `logging` option once, at start-up. */
export function checkLogging(value: unknown): LockLogging {
  if (value === undefined) return 'warn';
  if (!LEVELS.includes(value)) {
    throw new LockOptionsError(
      `logging must be 'warn' (the default: lost locks and outages), 'debug' (every acquisition and release too) or false (got ${typeof value === 'string' ? `'${value}'` : String(value)}).`,
    );
  }
  return value as LockLogging;
}

const ms = (value: number) => `${Math.round(value)} ms`;

/** Names a lock in a log line: its resources and fencing token, never its value. */
function describeLock(lock: Lock): string {
  return (
    describeResources(lock.resources) + (lock.token === undefined ? '' : ` (token ${lock.token})`)
  );
}

/**
 * Writes the engine's events to `logger` at `level`. Only the events that
 * level logs get a listener, so the others stay free.
 */
export function logLockEvents(engine: LockEngine, logger: LockLogger, level: LockLogging): void {
  if (level === false) return;
  engine.on('lost', ({ lock, error, held }) =>
    logger.warn(`${describeLock(lock)} lost after ${ms(held)}: ${error.message}`),
  );
  const debug = level === 'debug' && logger.debug ? logger.debug.bind(logger) : undefined;
  let closingLogged = false;
  engine.on('failed', ({ error }) => {
    if (error instanceof LockClosingError) {
      // A shutdown refusing new locks is the drain working, not an outage: one line, not one per request.
      if (!closingLogged) {
        closingLogged = true;
        logger.warn(
          `Shutting down: new locks are refused (503 over HTTP) until the lock service has stopped; the first was ${describeResources(error.resources)}, the others are logged at debug level.`,
        );
      } else debug?.(error.message);
      markLogged(error);
    } else if (error instanceof LockUnavailableError || error instanceof LockConfigurationError) {
      logger.error(error.message);
      markLogged(error);
    } else if (error instanceof LockBusyError || error instanceof LockAbortedError) {
      debug?.(error.message);
    } else {
      logger.warn(error.message);
    }
  });
  if (!debug) return;
  engine.on('acquired', ({ lock, attempts, waited, nodes }) =>
    debug(
      `Acquired ${describeLock(lock)} in ${ms(waited)} after ${attempts} attempt(s); ` +
        `${nodes.granted} of ${engine.nodes.length} node(s) granted it.`,
    ),
  );
  engine.on('contended', ({ resources, attempt, retryAfter }) =>
    debug(
      `${describeResources(resources)} busy at attempt ${attempt}` +
        (retryAfter === undefined ? '.' : `; the holder's lease ends in ${ms(retryAfter)}.`),
    ),
  );
  engine.on('skipped', ({ job, resources, tick, retryAfter }) =>
    debug(
      `Skipped a run of ${job}: ${describeResources(resources)} is held by another instance, which runs or ran ` +
        (tick === undefined ? 'it' : `the tick of ${new Date(tick).toISOString()}`) +
        (retryAfter === undefined ? '.' : ` (held for ${ms(retryAfter)} more).`),
    ),
  );
  engine.on('extended', ({ lock, ttl, duration }) =>
    debug(`Extended ${describeLock(lock)} by ${ms(ttl)} in ${ms(duration)}.`),
  );
  engine.on('released', ({ lock, result, held }) =>
    debug(
      `Released ${describeLock(lock)} after ${ms(held)}` +
        (result.released
          ? '.'
          : `; only ${result.nodesReleased} of ${engine.nodes.length} node(s) still held it.`),
    ),
  );
}
