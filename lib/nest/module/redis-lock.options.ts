import type { LockEngineOptions } from '../../engine/index.js';
import type { LockedDefaults } from '../locked/locked.options.js';
import type { LockLogging } from './lock-events.logger.js';

/**
 * Options of {@link RedisLockModule}: the engine's options (nodes, ttl,
 * retry, fencing, ...) plus the defaults of `@Locked()` methods. Without a
 * `logger`, warnings go through Nest's Logger under the `RedisLock` context.
 */
export interface RedisLockModuleOptions extends LockEngineOptions {
  /** Defaults of every `@Locked()` method. */
  locked?: LockedDefaults;
  /**
   * Register {@link LockContextInterceptor} for every handler, so lock
   * failures become 409/503 answers and the request carries its locks.
   * Default true.
   */
  contextInterceptor?: boolean;
  /**
   * What is logged (through `logger`, by default Nest's Logger with the
   * `RedisLock` context) about locks as they are used. Default `'warn'`:
   * lost locks as warnings, acquisitions that failed for an outage as errors.
   * `'debug'` adds a debug line per acquisition, contention, extension and
   * release; `false` logs none of these. Start-up checks and releases that
   * missed a node are warned about either way.
   */
  logging?: LockLogging;
}

/**
 * A class for `RedisLockModule.forRootAsync({ useClass })` or `useExisting`.
 *
 * @example
 * @Injectable()
 * class LockConfig implements RedisLockOptionsFactory {
 *   constructor(private readonly config: ConfigService) {}
 *   createRedisLockOptions(): RedisLockModuleOptions {
 *     return { nodes: this.config.getOrThrow<string>('LOCK_NODES').split(',') };
 *   }
 * }
 */
export interface RedisLockOptionsFactory {
  createRedisLockOptions(): RedisLockModuleOptions | Promise<RedisLockModuleOptions>;
}
