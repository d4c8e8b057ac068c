import { Controller, Param, ParseIntPipe, Post, Query } from '@nestjs/common';
import { FencingToken, LockContext, Locked } from 'nestjs-redis-lock';

/** Payments that keep their lock until `POST /orders/:id/release`. */
const held = new Map<number, () => void>();

@Controller('orders')
export class OrdersController {
  constructor(private readonly lockContext: LockContext) {}

  @Post(':id/pay')
  // wait: false: a second payment of the same order while one runs answers 409 at once.
  @Locked('order:<0>', { wait: false })
  async pay(
    @Param('id', ParseIntPipe) id: number,
    @Query('hold') hold: string | undefined,
    @FencingToken() token: number,
  ) {
    if (hold !== undefined) {
      const release = new Promise<void>((resolve) => held.set(id, resolve));
      console.log(`holding ${id}`);
      await release;
    }
    return { id, token, contextToken: this.lockContext.token };
  }

  @Post(':id/release')
  release(@Param('id', ParseIntPipe) id: number) {
    const resolve = held.get(id);
    held.delete(id);
    resolve?.();
    return { released: resolve !== undefined };
  }
}
