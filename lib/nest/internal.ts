// The Nest layer as the package's other layers (the testing entry point, health, telemetry)
// import it: its public names plus the pieces they share. Not an entry point, so nothing
// here is a promise to users.
export * from './index.js';
export { LOCKING_PROVIDERS } from './module/locking.providers.js';
export { REDIS_LOCK_MODULE_OPTIONS } from './module/redis-lock.module-definition.js';
export { checkLogging, logLockEvents } from './module/lock-events.logger.js';
export { MODULE_OPTION_KEYS } from './module/lock.service.js';
export { checkLockedOptions } from './locked/locked.options.js';
export { markLockFailure } from './context/lock-failures.js';
