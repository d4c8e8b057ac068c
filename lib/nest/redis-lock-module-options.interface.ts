import type { LockBusyError, LockEngineOptions, RetryOptions } from '../engine/index.js';
import type { LockLogging } from './lock-events.logger.js';

/** Defaults of every `@Locked()` method; each decorator can override them. */
export interface LockedDefaults {
  /** Lease in ms. Default: the module's ttl (5000). */
  ttl?: number;
  /**
   * Wait for a busy lock: `true` (default) waits per the retry policy up to
   * the module's waitTimeout, a number waits up to that many ms, `false`
   * makes one attempt and fails fast (HTTP 409 with Retry-After).
   */
  wait?: boolean | number;
  /** Retry policy while waiting. Default: the module's. */
  retry?: RetryOptions;
  /** Extend the lease while the method runs. Default true. */
  autoExtend?: boolean;
}

/** Options of one `@Locked()` method. */
export interface LockedOptions extends LockedDefaults {
  /**
   * What to do when the lock is held by someone else (after waiting, if
   * waiting): by default a LockBusyError is thrown, which the lock-context
   * interceptor turns into a 409 Conflict with Retry-After (or the RPC /
   * WebSocket equivalent). A function here runs instead, and what it returns
   * (or throws) becomes the method's result.
   *
   * @example
   * @Locked('report:<0>', { wait: false, onBusy: () => ({ status: 'already running' }) })
   */
  onBusy?: (error: LockBusyError, args: unknown[]) => unknown;
  /**
   * Keep the lock at least this many ms after it was granted, even when the
   * method returned sooner: the `lockAtLeastFor` of JVM schedulers. An
   * instance whose timer fires a little later (another clock, a busy event
   * loop) then finds the tick taken and skips it. The lease is still renewed
   * while the method runs; once it returns, the lease is set to end with the
   * hold, so the hold outlives a crash, and the lock is released after it.
   *
   * @example
   * @Cron('0 * * * * *')
   * @Locked('digest:<tick>', { holdAtLeast: 30_000 })
   * sendDigest() { ... }
   */
  holdAtLeast?: number;
  /**
   * The period in ms that `<tick>` counts in, for a method that no `@Cron()`
   * or `@Interval()` schedules (or to override its schedule): `<tick>` is then
   * the call's time rounded down to a multiple of it.
   */
  tick?: number;
}

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
