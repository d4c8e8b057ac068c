import { Module } from '@nestjs/common';
import { LockService } from './lock.service.js';
import {
  ConfigurableModuleClass,
  REDIS_LOCK_MODULE_OPTIONS,
} from './redis-lock.module-definition.js';
import type { RedisLockModuleOptions } from './redis-lock-module-options.interface.js';

/**
 * Registers the Redis nodes and {@link LockService}.
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
  providers: [
    {
      provide: LockService,
      inject: [REDIS_LOCK_MODULE_OPTIONS],
      // Options are validated here, once, whichever of forRoot / forRootAsync supplied them;
      // the connections are open and checked before the application starts.
      useFactory: async (options: RedisLockModuleOptions) => {
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
  ],
  exports: [LockService],
})
export class RedisLockModule extends ConfigurableModuleClass {}
