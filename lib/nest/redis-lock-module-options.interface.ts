import type { LockEngineOptions } from '../engine/index.js';

/**
 * Options of {@link RedisLockModule}: the engine's options (nodes, ttl,
 * retry, fencing, ...). Without a `logger`, warnings go through Nest's
 * Logger under the `RedisLock` context.
 */
export type RedisLockModuleOptions = LockEngineOptions;
