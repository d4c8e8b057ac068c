import type { Provider } from '@nestjs/common';
import { APP_INTERCEPTOR, HttpAdapterHost } from '@nestjs/core';
import { LockContext } from '../context/lock-context.js';
import { LockContextInterceptor } from '../context/lock-context.interceptor.js';
import { LeaderService } from '../leaders/leader.service.js';
import { LockedMethodsExplorer } from '../locked/locked-methods.explorer.js';
import { REDIS_LOCK_MODULE_OPTIONS } from './redis-lock.module-definition.js';
import type { RedisLockModuleOptions } from './redis-lock.options.js';

/**
 * What every module that provides LockService also registers: the
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
