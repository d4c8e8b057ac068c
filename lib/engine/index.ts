// `nestjs-redis-lock/engine`: the lock engine without Nest. Only what users call or name
// belongs here (api/engine.api.md lists it); helpers the package shares internally are in
// internal.ts.
export { LockEngine, MAX_RESOURCE_LENGTH } from './lock-engine.js';
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
  type AcquireOptions,
  type ClusterNodeSpec,
  type LockEngineOptions,
  type LockLogger,
  type LockNodeSpec,
  type RetryOptions,
  type TryAcquireOptions,
  type UsingOptions,
} from './lock-options.js';
export type { LockHealth, LockInspection, NodeHealth, NodeLockState } from './lock-admin.js';
export { readWriteLock, semaphore } from './lease-parts.js';
export { ReadWriteHold, ReadWriteLock, type LockMode } from './read-write-lock.js';
export { MAX_PERMITS, Permit, Semaphore } from './semaphore.js';
export type {
  LeaseHolding,
  LeaseInspection,
  LineWaiter,
  NodeLeaseHolder,
  NodeLeaseState,
  NodeLineWaiter,
  ReadWriteInspection,
  SemaphoreInspection,
} from './admin/lease-verdict.js';
