// The package's own import hub: the public engine entry point plus the helpers that the Nest
// layer, the CLI, the testing entry point and the tests share. Not an entry point
// (package.json "exports" does not name it), so nothing here is a promise to users.
export * from './index.js';
export { normalizeResources, resourceProblem } from './lock-engine.js';
export { describeResources } from './describe-resources.js';
export { type ResolvedEngineOptions } from './lock-options.js';
export { resolveEngineOptions } from './resolve-options.js';
export { findRisks, type ClusterFacts, type NodeFacts, type ServerFacts } from './node-checks.js';
// Administration for operators (the command-line tool): verdicts, node errors, counter
// lifetimes and set-up risks, read through the engine's nodes so the tool needs no client.
export { judgeLock, type JudgedLock, type LockVerdict } from './admin/lock-verdict.js';
export { explainNodeError } from './admin/node-errors.js';
export {
  compareCounterLifetimes,
  sampleCounterLifetimes,
  type CounterLifetimeMismatch,
  type CounterLifetimes,
} from './admin/counter-lifetimes.js';
export { collectRisks } from './node-checks.js';
// What the Nest layer and the testing entry point use besides the public names.
export { type ResolvedRetry } from './lock-options.js';
export { checkMs, checkRoutine, resolveRetry } from './option-checks.js';
export { rejectUnknownOptions } from './resolve-options.js';
export type { LeaseGrant, LockOwner } from './lock.js';
export { judgeInspection } from './lock-admin.js';
export { retryDelay } from './retry-delay.js';
// A call's options, checked and resolved the same way by every engine (the in-memory one too).
export { callTimings, checkCallOptions, singleAttempt } from './call-request.js';
export { holdWhile, keepAlive } from './lease-renewal.js';
export { lostOnNodes } from './lease-rounds.js';
// The events every engine reports about a call's outcome, the in-memory one too.
export {
  reportAcquired,
  reportContended,
  reportExtended,
  reportFailed,
  reportLost,
  reportReleased,
} from './event-reports.js';
// The read-write locks and semaphores of a name, read and judged for operators (the CLI).
export {
  judgeReadWrite,
  judgeSemaphore,
  type LeaseHolding,
  type LeaseInspection,
  type LineWaiter,
  type NodeLeaseHolder,
  type NodeLeaseState,
  type NodeLineWaiter,
  type ReadWriteInspection,
  type SemaphoreInspection,
} from './admin/lease-verdict.js';
export {
  inspectLeases,
  listLeases,
  type LeaseInspections,
  type LeaseListing,
} from './admin/lease-inspection.js';
// What the in-memory engine's read-write locks and semaphores check and say, as the real ones do.
export { checkMode, readWriteBusyMessage } from './read-write-lock.js';
export { checkPermits, semaphoreBusyMessage } from './semaphore.js';
