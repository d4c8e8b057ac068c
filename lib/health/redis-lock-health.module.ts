import { Module } from '@nestjs/common';
import { TerminusModule } from '@nestjs/terminus';
import { RedisLockHealthIndicator } from './redis-lock.health.js';

/**
 * Provides {@link RedisLockHealthIndicator} (and re-exports `TerminusModule`
 * for `HealthCheckService`). Import it next to `RedisLockModule`, in the
 * module of the health controller.
 *
 * @example
 * @Module({ imports: [RedisLockHealthModule], controllers: [HealthController] })
 * export class HealthModule {}
 */
@Module({
  imports: [TerminusModule],
  providers: [RedisLockHealthIndicator],
  exports: [RedisLockHealthIndicator, TerminusModule],
})
export class RedisLockHealthModule {}
