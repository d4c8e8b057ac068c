import { Logger, type OnApplicationShutdown } from '@nestjs/common';
import { LockEngine, type LockError, type NodeResults } from '../engine/index.js';
import { checkLogging, logLockEvents } from './lock-events.logger.js';
import { markLockFailure } from './lock-failures.js';
import type { RedisLockModuleOptions } from './redis-lock-module-options.interface.js';

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
 *     await this.orders.markPaid(orderId, lock.token);
 *   });
 * }
 */
export class LockService extends LockEngine implements OnApplicationShutdown {
  constructor(options: RedisLockModuleOptions) {
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

  /** Tags acquisition failures so the lock-context interceptor answers them (409, 503) wherever they were taken. */
  protected override failed(
    request: { readonly resources: readonly string[] },
    attempts: number,
    error: LockError,
    nodes?: NodeResults,
  ): LockError {
    return markLockFailure(super.failed(request, attempts, error, nodes));
  }

  async onApplicationShutdown(): Promise<void> {
    await this.close();
  }
}
