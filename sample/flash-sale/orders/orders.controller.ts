import { Body, Controller, Get, HttpCode, Param, ParseIntPipe, Post } from '@nestjs/common';
import type { Order } from '../store/flash-sale.store.js';
import { OrdersService } from './orders.service.js';

@Controller('orders')
export class OrdersController {
  constructor(private readonly orders: OrdersService) {}

  /** A pending order, to be paid later (`{ "productId": 1 }`). */
  @Post()
  create(@Body('productId', ParseIntPipe) productId: number): Order {
    return this.orders.create(productId);
  }

  @Get(':id')
  order(@Param('id', ParseIntPipe) id: number): Order {
    return this.orders.find(id);
  }

  /** 200 with the paid order; 409 already paid, busy, or refused by the fence. */
  @Post(':id/pay')
  @HttpCode(200)
  pay(@Param('id', ParseIntPipe) id: number): Promise<Order> {
    return this.orders.pay(id);
  }
}
