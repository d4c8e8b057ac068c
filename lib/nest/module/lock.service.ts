import { Logger, type BeforeApplicationShutdown, type OnApplicationShutdown } from '@nestjs/common';
import {
  LockEngine,
  readWriteLock,
  LockOptionsError,
  rejectUnknownOptions,
  semaphore,
  type ReadWriteLock,
  type Semaphore,
  type LockEngineOptions,
  type LockError,
  type NodeResults,
} from '../../engine/internal.js';
import { checkLogging, logLockEvents } from './lock-events.logger.js';
import { markLockFailure } from '../context/lock-failures.js';
import type { RedisLockModuleOptions } from './redis-lock.options.js';

/**
 * The options RedisLockModule reads itself, besides the engine's: each of the
 * module's own options named once (`isGlobal` is the module builder's).
 * Shared with the testing module, which checks the same options. Not marked
 * internal: the testing entry point's declarations import it, and a stripped
 * declaration breaks a consumer's compile with `skipLibCheck` off.
 */
export const MODULE_OPTION_KEYS = [
  ...Object.keys({
    locked: true,
    contextInterceptor: true,
    logging: true,
  } satisfies Record<Exclude<keyof RedisLockModuleOptions, keyof LockEngineOptions>, true>),
  'isGlobal',
];

/**
 * The lock engine as a Nest provider: inject it to acquire, try, extend,
 * release and run code under a lock by hand. Closes the connections it
 * opened when the application shuts down; clients you passed in stay open.
 *
 * @example
 * constructor(private readonly locks: LockService) {}
 *
 * async pay(orderId: number) {
 *   return this.locks.using(`order:${orderId}`, async (lock) => {
 *     // token: a number while fencing is on (the default), undefined with fencing: false.
 *     await this.orders.markPaid(orderId, lock.token!);
 *   });
 * }
 */
export class LockService
  extends LockEngine
  implements BeforeApplicationShutdown, OnApplicationShutdown
{
  constructor(options: RedisLockModuleOptions) {
    // forRoot() keeps isGlobal for itself; here it came from what a forRootAsync() factory returned.
    if ((options as { isGlobal?: unknown } | undefined)?.isGlobal !== undefined) {
      throw new LockOptionsError(
        'isGlobal is an option of RedisLockModule.forRootAsync() itself, not of the options its factory returns: ' +
          'write RedisLockModule.forRootAsync({ isGlobal: true, useFactory: ... }).',
      );
    }
    rejectUnknownOptions('RedisLockModule options', options, MODULE_OPTION_KEYS);
    // The Nest-only options are read by the module; the engine checks the rest.
    const {
      locked: _locked,
      contextInterceptor: _interceptor,
      logging,
      ...engineOptions
    } = options ?? {};
    super({ logger: new Logger('RedisLock'), ...engineOptions });
    logLockEvents(this, this.options.logger, checkLogging(logging));
  }

  /**
   * Many readers or one writer on `resource`, over this engine's nodes
   * (docs/read-write-locks.md). The object is light: make one where needed.
   *
   * @example
   * return this.locks.readWriteLock('catalogue').using('read', () => this.render());
   */
  readWriteLock(resource: string): ReadWriteLock {
    return readWriteLock(this, resource);
  }

  /**
   * At most `permits` holders of `name` at once across every instance, over
   * this engine's nodes (docs/semaphores.md). Throws LockOptionsError unless
   * `permits` is a whole number from 1 to MAX_PERMITS.
   *
   * @example
   * return this.locks.semaphore('payments-api', 4).using(() => this.provider.charge(order));
   */
  semaphore(name: string, permits: number): Semaphore {
    return semaphore(this, name, permits);
  }

  /** Tags acquisition failures so the lock-context interceptor answers them (409, 503) wherever they were taken. */
  protected override failed(
    request: { readonly resources: readonly string[] },
    attempts: number,
    error: LockError,
    nodes?: NodeResults,
  ): LockError {
    return markLockFailure(super.failed(request, attempts, error, nodes));
  }

  /**
   * The graceful part of the application's shutdown, while its server still
   * answers: new locks fail with LockClosingError (503), waiters stop waiting,
   * and the locks in flight are extended until their methods release them,
   * for up to `shutdownTimeout` (see {@link LockEngine.drain}).
   */
  async beforeApplicationShutdown(): Promise<void> {
    await this.drain();
  }

  /** Closes the connections the module opened, once the server is closed. */
  async onApplicationShutdown(): Promise<void> {
    await this.close();
  }
}
