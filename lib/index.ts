// The Nest layer
export { RedisLockModule } from './nest/redis-lock.module.js';
export { LockService } from './nest/lock.service.js';
export { LeaderService } from './nest/leader.service.js';
export type { SkippedRun } from './nest/scheduled-jobs.js';
export { Locked } from './nest/locked.decorator.js';
export { CurrentLock, FencingToken, LockSignal } from './nest/lock-params.decorator.js';
export { LockContext, RequestLocks, getRequestLocks } from './nest/lock-context.js';
export { LockContextInterceptor } from './nest/lock-context.interceptor.js';
export { LockKeyError, LockSetupError } from './nest/locked-errors.js';
export { isLockFailure, lockFailureBody, type LockFailureBody } from './nest/lock-failures.js';
export { lockGraphQLErrorBody, type LockGraphQLErrorBody } from './nest/graphql-lock-failures.js';
export type { LockKey, LockKeyFunction } from './nest/lock-key.js';
export type { LockLogging } from './nest/lock-events.logger.js';
export type {
  LockedDefaults,
  LockedOptions,
  RedisLockModuleOptions,
  RedisLockOptionsFactory,
} from './nest/redis-lock-module-options.interface.js';

// The engine, usable without Nest
export {
  LockEngine,
  Lock,
  LeaderElection,
  LeadershipEndedError,
  type LeaderElectionOptions,
  type LeaderTerm,
  type RetirementReason,
  LOCK_DEFAULTS,
  MAX_RESOURCE_LENGTH,
  LockError,
  LockBusyError,
  LockTimeoutError,
  LockUnavailableError,
  LockClosingError,
  LockLostError,
  LockAbortedError,
  LockOptionsError,
  LockConfigurationError,
  type AcquireOptions,
  type LockEngineOptions,
  type LockEvents,
  type NodeResults,
  type NodeRestart,
  type LockHealth,
  type LockInspection,
  type NodeHealth,
  type NodeLockState,
  type LockLogger,
  type ClusterNodeSpec,
  type LockNodeSpec,
  type NodeFailure,
  type ReleaseResult,
  type RetryOptions,
  type UsingOptions,
} from './engine/index.js';
