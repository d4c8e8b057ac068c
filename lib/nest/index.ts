// The Nest layer's public names; the package's main entry point (lib/index.ts) exports them.
//
// One folder per feature, and a file's name says its role the same way in every folder:
//   module/      RedisLockModule, its options, the providers it registers, LockService
//   locked/      @Locked(): the decorator, its key, options, metadata, errors, the lock
//                parameters, the runners that call a method under its lock, the explorer
//   context/     the lock context of a call chain and a request, the interceptor, and what
//                a lock failure answers over HTTP, RPC, WebSockets and GraphQL
//   scheduling/  @Locked() on @nestjs/schedule jobs: ticks, skipped runs, minimum holds
//   leaders/     LeaderService
// Nest building blocks end in .module, .module-definition, .providers, .service, .decorator,
// .interceptor or .explorer; option types with their checks in .options; error classes in
// .errors; reflect-metadata keys and what they carry in .metadata; signature types in .types;
// code that runs a call under a lock in .runner; an event added to the engine's in .event;
// an event logger in .logger. Any other file is named for what it computes (lock-key,
// lock-context, lock-failures, job-schedule, cron-tick).
export { RedisLockModule } from './module/redis-lock.module.js';
export type {
  RedisLockModuleOptions,
  RedisLockOptionsFactory,
} from './module/redis-lock.options.js';
export { LockService } from './module/lock.service.js';
export type { LockLogging } from './module/lock-events.logger.js';
export { Limited, Locked } from './locked/locked.decorator.js';
export type {
  LockableMethod,
  LockedDecorator,
  LockedGoesOnMethodsOnly,
  LockedMethodMustReturnAPromiseOrAnObservable,
  LockedResult,
  LockKeyFunctionMustAcceptTheMethodArguments,
} from './locked/locked.types.js';
export type {
  LimitedOptions,
  LockedDefaults,
  LockedMethodOptions,
  LockedOptions,
} from './locked/locked.options.js';
export type { LockKey, LockKeyFunction } from './locked/lock-key.js';
export { CurrentLock, FencingToken, LockSignal } from './locked/lock-params.decorator.js';
export {
  LockEngineUnsupportedError,
  LockKeyError,
  LockSetupError,
} from './locked/locked.errors.js';
export { LockContext, RequestLocks, getRequestLocks } from './context/lock-context.js';
export { LockContextInterceptor } from './context/lock-context.interceptor.js';
export { isLockFailure, lockFailureBody, type LockFailureBody } from './context/lock-failures.js';
export {
  lockGraphQLErrorBody,
  type LockGraphQLErrorBody,
} from './context/graphql-lock-failures.js';
export type { SkippedRun } from './scheduling/skipped-run.event.js';
export { LeaderService } from './leaders/leader.service.js';
