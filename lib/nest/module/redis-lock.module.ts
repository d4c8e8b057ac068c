import { Module } from '@nestjs/common';
import { DiscoveryModule } from '@nestjs/core';
import { LockContext } from '../context/lock-context.js';
import { LeaderService } from '../leaders/leader.service.js';
import { checkLockedOptions } from '../locked/locked.options.js';
import { LockService } from './lock.service.js';
import { LOCKING_PROVIDERS } from './locking.providers.js';
import {
  ConfigurableModuleClass,
  REDIS_LOCK_MODULE_OPTIONS,
} from './redis-lock.module-definition.js';
import type { RedisLockModuleOptions } from './redis-lock.options.js';

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
