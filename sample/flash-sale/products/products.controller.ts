import { Controller, Get, NotFoundException, Param, ParseIntPipe, Post } from '@nestjs/common';
import { FlashSaleStore, type Product } from '../store/flash-sale.store.js';
import { CheckoutService, type Sale } from './checkout.service.js';

@Controller('products')
export class ProductsController {
  constructor(
    private readonly store: FlashSaleStore,
    private readonly checkout: CheckoutService,
  ) {}

  @Get(':id')
  product(@Param('id', ParseIntPipe) id: number): Product {
    const product = this.store.product(id);
    if (!product) throw new NotFoundException(`There is no product ${id}.`);
    return product;
  }

  /** 201 with the sale; 410 sold out; 409 busy (Retry-After) or refused by the fence. */
  @Post(':id/purchase')
  purchase(@Param('id', ParseIntPipe) id: number): Promise<Sale> {
    return this.checkout.buy(id);
  }
}
