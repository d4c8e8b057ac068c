import { Module, type Provider } from '@nestjs/common';
import { APP_INTERCEPTOR, DiscoveryModule, HttpAdapterHost } from '@nestjs/core';
import { LockContext } from './lock-context.js';
import { LockContextInterceptor } from './lock-context.interceptor.js';
import { LeaderService } from './leader.service.js';
import { LockService } from './lock.service.js';
import { LockedMethodsExplorer } from './locked-methods.explorer.js';
import { checkLockedOptions } from './locked-options.js';
import {
  ConfigurableModuleClass,
  REDIS_LOCK_MODULE_OPTIONS,
} from './redis-lock.module-definition.js';
import type { RedisLockModuleOptions } from './redis-lock-module-options.interface.js';

/**
 * @internal What every module that provides LockService also registers: the
 * lock context, the set-up of `@Locked()` methods and the interceptor. Shared
 * with the testing module, so that a test runs the same Nest layer.
 */
export const LOCKING_PROVIDERS: Provider[] = [
  LockContext,
  LeaderService,
  LockedMethodsExplorer,
  {
    provide: APP_INTERCEPTOR,
    inject: [REDIS_LOCK_MODULE_OPTIONS, HttpAdapterHost],
    // With `contextInterceptor: false`, no interceptor at all: Nest skips a global
    // interceptor that a factory resolves to null, and a handler without
    // interceptors runs without Nest's per-request Observable pipeline.
    useFactory: (options: RedisLockModuleOptions, adapterHost: HttpAdapterHost) =>
      options.contextInterceptor === false ? null : new LockContextInterceptor(adapterHost),
  },
];

/**
 * Registers the Redis nodes, {@link LockService}, {@link LockContext}, the
 * set-up of `@Locked()` methods and (unless `contextInterceptor: false`) the
 * {@link LockContextInterceptor} for every handler.
 *
 * @example
 * RedisLockModule.forRoot({ nodes: ['redis://localhost:6379'], isGlobal: true })
 *
 * RedisLockModule.forRootAsync({
 *   imports: [ConfigModule],
 *   inject: [ConfigService],
 *   useFactory: (config: ConfigService) => ({ nodes: config.getOrThrow<string>('LOCK_NODES').split(',') }),
 * })
 */
@Module({
  imports: [DiscoveryModule],
  providers: [
    {
      provide: LockService,
      inject: [REDIS_LOCK_MODULE_OPTIONS],
      // Options are validated here, once, whichever of forRoot / forRootAsync supplied them;
      // the connections are open and checked before the application starts.
      useFactory: async (options: RedisLockModuleOptions) => {
        // Every option is checked before a connection opens: a failed start leaks nothing.
        checkLockedOptions('RedisLockModule locked defaults', options?.locked, false);
        const service = new LockService(options);
        try {
          await service.connect();
        } catch (error) {
          await service.close();
          throw error;
        }
        return service;
      },
    },
    ...LOCKING_PROVIDERS,
  ],
  exports: [LockService, LockContext, LeaderService],
})
export class RedisLockModule extends ConfigurableModuleClass {}
