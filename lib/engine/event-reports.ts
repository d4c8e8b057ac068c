import type { EventEmitter } from 'node:events';
import type { Lock, ReleaseResult } from './lock.js';
import type { LockEvents, NodeResults } from './lock-events.js';
import type { LockError, LockLostError } from './lock-errors.js';

/**
 * The events an engine (the Redis one and the in-memory one alike) reports
 * about a call's outcome. Each checks for listeners first: with none, no
 * payload is built and the nodes' results are not counted.
 */
type Reporter = EventEmitter<LockEvents>;

/** An acquisition as the events see it: `started` is when its first attempt began. */
interface Call {
  readonly resources: readonly string[];
  readonly started?: number;
  readonly waiting?: boolean;
}

const waitedFor = (call: Call): number =>
  call.started === undefined ? 0 : performance.now() - call.started;

/** A call that had to wait stopped waiting, just before its `acquired` or `failed`. */
export function reportWaited(engine: Reporter, call: Call, attempts: number, acquired: boolean) {
  if (engine.listenerCount('waited') === 0) return;
  engine.emit('waited', {
    resources: call.resources,
    attempts,
    waited: waitedFor(call),
    acquired,
  });
}

/** A grant; `round` is counted into node results by `results` only when someone listens. */
export function reportAcquired<R>(
  engine: Reporter,
  call: Call,
  lock: Lock,
  attempts: number,
  round: R,
  results: (round: R) => NodeResults,
): void {
  if (call.waiting) reportWaited(engine, call, attempts, true);
  if (engine.listenerCount('acquired') === 0) return;
  engine.emit('acquired', { lock, attempts, waited: waitedFor(call), nodes: results(round) });
}

/** An acquisition gave up; `nodes`: how its last round went, when it got that far. */
export function reportFailed(
  engine: Reporter,
  call: Call,
  attempts: number,
  error: LockError,
  nodes: NodeResults | undefined,
): void {
  if (call.waiting) reportWaited(engine, call, attempts, false);
  if (engine.listenerCount('failed') === 0) return;
  engine.emit('failed', {
    resources: call.resources,
    attempts,
    waited: waitedFor(call),
    error,
    nodes,
  });
}

/** A release done on the nodes; `started`: when the release began. */
export function reportReleased<R>(
  engine: Reporter,
  lock: Lock,
  result: ReleaseResult,
  started: number,
  round: R,
  results: (round: R) => NodeResults,
): void {
  if (engine.listenerCount('released') === 0) return;
  const now = performance.now();
  engine.emit('released', {
    lock,
    result,
    held: now - lock.grantedAt,
    duration: now - started,
    nodes: results(round),
  });
}

/** A refused attempt that will try again; `round` is counted as for {@link reportAcquired}. */
export function reportContended<R>(
  engine: Reporter,
  call: Call,
  attempt: number,
  retryAfter: number | undefined,
  round: R,
  results: (round: R) => NodeResults,
): void {
  if (engine.listenerCount('contended') === 0) return;
  engine.emit('contended', {
    resources: call.resources,
    attempt,
    retryAfter,
    nodes: results(round),
  });
}

/** An extension a quorum renewed; `started`: when it began. */
export function reportExtended<R>(
  engine: Reporter,
  lock: Lock,
  started: number,
  round: R,
  results: (round: R) => NodeResults,
  ttl: number,
): void {
  if (engine.listenerCount('extended') === 0) return;
  engine.emit('extended', {
    lock,
    ttl,
    duration: performance.now() - started,
    nodes: results(round),
  });
}

/** A lock was lost: its lease ran out, or another value took its keys. */
export function reportLost(engine: Reporter, lock: Lock, error: LockLostError): void {
  if (engine.listenerCount('lost') === 0) return;
  engine.emit('lost', { lock, error, held: performance.now() - lock.grantedAt });
}
