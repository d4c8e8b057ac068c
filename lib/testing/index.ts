// `nestjs-redis-lock/testing`: RedisLockModule's stand-in for tests, over an engine held in
// memory. A separate entry point, so that applications never load it outside their tests.
export {
  RedisLockTestingModule,
  type RedisLockTestingOptions,
} from './redis-lock-testing.module.js';
export {
  InMemoryLockEngine,
  type ForeignHold,
  type InMemoryLockEngineOptions,
  type LockGrant,
} from './in-memory-lock-engine.js';
export type { MemoryReadWriteLock, MemorySemaphore } from './memory-leases.js';
