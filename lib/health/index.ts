// `nestjs-redis-lock/health`: the @nestjs/terminus health indicator. A separate
// entry point, so that apps without @nestjs/terminus never load it.
export { RedisLockHealthModule } from './redis-lock-health.module.js';
export {
  RedisLockHealthIndicator,
  type RedisLockHealthDetails,
  type RedisLockNodeStatus,
} from './redis-lock.health.js';
