export {
  LockEngine,
  normalizeResources,
  resourceProblem,
  MAX_RESOURCE_LENGTH,
} from './lock-engine.js';
export { Lock, type ReleaseResult } from './lock.js';
export {
  LeaderElection,
  LeadershipEndedError,
  type LeaderElectionOptions,
  type LeaderTerm,
  type RetirementReason,
} from './leader-election.js';
export type { LockEvents, NodeResults } from './lock-events.js';
export type { NodeRestart } from './node-restarts.js';
export * from './lock-errors.js';
export {
  LOCK_DEFAULTS,
  resolveEngineOptions,
  type AcquireOptions,
  type ClusterNodeSpec,
  type LockEngineOptions,
  type LockLogger,
  type LockNodeSpec,
  type ResolvedEngineOptions,
  type RetryOptions,
  type UsingOptions,
} from './lock-options.js';
export { findRisks, type ClusterFacts, type NodeFacts, type ServerFacts } from './node-checks.js';
export type { LockHealth, LockInspection, NodeHealth, NodeLockState } from './lock-admin.js';
export { readWriteLock, semaphore } from './lease-parts.js';
export { ReadWriteHold, ReadWriteLock, type LockMode } from './read-write-lock.js';
export { MAX_PERMITS, Permit, Semaphore } from './semaphore.js';
