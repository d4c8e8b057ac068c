import { Module } from '@nestjs/common';
import { ConfigModule } from '@nestjs/config';
import { RedisLockModule } from 'nestjs-redis-lock';
import { flashSaleConfig, type FlashSaleConfig } from './flash-sale.config.js';
import { LockEventsLogger } from './lock-events.logger.js';
import { OrdersModule } from './orders/orders.module.js';
import { ProductsModule } from './products/products.module.js';

@Module({
  imports: [
    ConfigModule.forRoot({ isGlobal: true, load: [flashSaleConfig] }),
    RedisLockModule.forRootAsync({
      isGlobal: true,
      inject: [flashSaleConfig.KEY],
      useFactory: (config: FlashSaleConfig) => ({ nodes: config.lockNodes, ttl: config.lockTtlMs }),
    }),
    ProductsModule,
    OrdersModule,
  ],
  providers: [LockEventsLogger],
})
export class AppModule {}
