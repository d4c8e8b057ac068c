import { Module } from '@nestjs/common';
import { PaymentsModule } from '../payments/payments.module.js';
import { StoreModule } from '../store/store.module.js';
import { OrdersController } from './orders.controller.js';
import { OrdersService } from './orders.service.js';

@Module({
  imports: [StoreModule, PaymentsModule],
  controllers: [OrdersController],
  providers: [OrdersService],
})
export class OrdersModule {}
