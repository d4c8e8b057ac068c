import { ConfigurableModuleBuilder } from '@nestjs/common';
import type { RedisLockModuleOptions } from './redis-lock.options.js';

export const {
  ConfigurableModuleClass,
  MODULE_OPTIONS_TOKEN: REDIS_LOCK_MODULE_OPTIONS,
  OPTIONS_TYPE,
  ASYNC_OPTIONS_TYPE,
} = new ConfigurableModuleBuilder<RedisLockModuleOptions>({ moduleName: 'RedisLock' })
  .setClassMethodName('forRoot')
  .setFactoryMethodName('createRedisLockOptions')
  .setExtras({ isGlobal: false }, (definition, extras) => ({
    ...definition,
    global: extras.isGlobal,
  }))
  .build();
