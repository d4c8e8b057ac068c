import { Logger, Module, type DynamicModule, type OnApplicationShutdown } from '@nestjs/common';
import { DiscoveryModule } from '@nestjs/core';
import type { LockLogger } from '../engine/index.js';
import { rejectUnknownOptions } from '../engine/internal.js';
import {
  checkLockedOptions,
  checkLogging,
  LeaderService,
  LockContext,
  LOCKING_PROVIDERS,
  logLockEvents,
  LockService,
  MODULE_OPTION_KEYS,
  REDIS_LOCK_MODULE_OPTIONS,
  type LockedDefaults,
  type LockLogging,
  type RedisLockModuleOptions,
} from '../nest/internal.js';
import { InMemoryLockEngine, type InMemoryLockEngineOptions } from './in-memory-lock-engine.js';

/**
 * Options of {@link RedisLockTestingModule.forRoot}: the module's options,
 * with `nodes` optional (a number of simulated nodes, or the application's
 * node list to simulate one node per entry; default one node).
 */
export interface RedisLockTestingOptions extends InMemoryLockEngineOptions {
  /** Defaults of every `@Locked()` method, as in RedisLockModule. */
  locked?: LockedDefaults;
  /** Register the lock-context interceptor (409 / 503 answers). Default true, as in RedisLockModule. */
  contextInterceptor?: boolean;
  /**
   * What is logged about locks as they are used. Default `false` (unlike
   * RedisLockModule's `'warn'`): a test that expires a lease on purpose
   * should not print a warning for it.
   */
  logging?: LockLogging;
  /** Make the module global, as `RedisLockModule.forRoot({ isGlobal: true })` does. */
  isGlobal?: boolean;
}

/** The in-memory engine as a Nest provider: logs like LockService, closed with the application. */
class TestingLockService extends InMemoryLockEngine implements OnApplicationShutdown {
  constructor(options: InMemoryLockEngineOptions & { logging?: LockLogging }) {
    const { logging = false, ...engineOptions } = options;
    super({ logger: new Logger('RedisLock') as LockLogger, ...engineOptions });
    // The logger only reads the events and the node count, which this engine has too.
    logLockEvents(this as never, this.options.logger, checkLogging(logging));
  }

  async onApplicationShutdown(): Promise<void> {
    await this.close();
  }
}

/**
 * A drop-in for RedisLockModule in tests: the same providers (LockService,
 * LockContext, the set-up of `@Locked()` methods, the lock-context
 * interceptor) over an {@link InMemoryLockEngine}, so no Redis is needed and
 * Jest's fake timers drive leases, extension and waiting. The engine is
 * injected as `LockService` and as `InMemoryLockEngine`, for its hooks.
 *
 * @example
 * const moduleRef = await Test.createTestingModule({
 *   imports: [RedisLockTestingModule.forRoot()],
 *   providers: [CheckoutService],
 * }).compile();
 * const locks = moduleRef.get(InMemoryLockEngine);
 * locks.hold('product:1'); // someone else has it
 * await expect(moduleRef.get(CheckoutService).buy(1)).rejects.toThrow(LockBusyError);
 *
 * // Or under an application module that imports RedisLockModule: its engine replaced,
 * // so it never connects.
 * Test.createTestingModule({ imports: [AppModule] })
 *   .overrideProvider(LockService)
 *   .useValue(new InMemoryLockEngine());
 */
@Module({})
export class RedisLockTestingModule {
  static forRoot(options: RedisLockTestingOptions = {}): DynamicModule {
    const { locked, contextInterceptor, isGlobal = false, ...engineOptions } = options ?? {};
    const moduleOptions = { locked, contextInterceptor } as RedisLockModuleOptions;
    return {
      module: RedisLockTestingModule,
      global: isGlobal,
      imports: [DiscoveryModule],
      providers: [
        { provide: REDIS_LOCK_MODULE_OPTIONS, useValue: moduleOptions },
        {
          provide: LockService,
          // Checked when the module starts, with RedisLockModule's messages.
          useFactory: () => {
            rejectUnknownOptions('RedisLockTestingModule options', options, MODULE_OPTION_KEYS);
            checkLockedOptions('RedisLockTestingModule locked defaults', locked, false);
            return new TestingLockService(engineOptions);
          },
        },
        { provide: InMemoryLockEngine, useExisting: LockService },
        ...LOCKING_PROVIDERS,
      ],
      exports: [LockService, InMemoryLockEngine, LockContext, LeaderService],
    };
  }
}
