import { Module } from '@nestjs/common';
import { PaymentsModule } from '../payments/payments.module.js';
import { StoreModule } from '../store/store.module.js';
import { CheckoutService } from './checkout.service.js';
import { ProductsController } from './products.controller.js';

@Module({
  imports: [StoreModule, PaymentsModule],
  controllers: [ProductsController],
  providers: [CheckoutService],
})
export class ProductsModule {}
