// Nest layer
export { RedisLockModule } from './nest/redis-lock.module.js';
export { LockService } from './nest/lock.service.js';
export type { RedisLockModuleOptions } from './nest/redis-lock-module-options.interface.js';

// Engine (usable without Nest)
export * from './engine/index.js';
