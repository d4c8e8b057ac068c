import { Module } from '@nestjs/common';
import { RedisLockModule } from 'nestjs-redis-lock';
import { OrdersController } from './orders.controller.js';

const url = process.env.REDIS_URL;
if (!url)
  throw new Error('Set REDIS_URL to the redis-server to lock on, e.g. redis://127.0.0.1:6379');

@Module({
  imports: [RedisLockModule.forRoot({ nodes: [url] })],
  controllers: [OrdersController],
})
export class AppModule {}

// The published types are checked, not any: nodes is a list.
// @ts-expect-error a single URL is not a list of nodes
void (() => RedisLockModule.forRoot({ nodes: url }));
