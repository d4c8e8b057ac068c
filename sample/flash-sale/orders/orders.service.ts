import { Inject, Injectable, Logger, NotFoundException } from '@nestjs/common';
import { LockService, type Lock } from 'nestjs-redis-lock';
import { flashSaleConfig, type FlashSaleConfig } from '../flash-sale.config.js';
import { AlreadyPaidException, StaleTokenException } from '../flash-sale.errors.js';
import { PaymentsService } from '../payments/payments.service.js';
import { FlashSaleStore, type Order } from '../store/flash-sale.store.js';

@Injectable()
export class OrdersService {
  private readonly logger = new Logger('Orders');

  constructor(
    private readonly store: FlashSaleStore,
    private readonly payments: PaymentsService,
    private readonly locks: LockService,
    @Inject(flashSaleConfig.KEY) private readonly config: FlashSaleConfig,
  ) {}

  create(productId: number): Order {
    if (!this.store.product(productId))
      throw new NotFoundException(`There is no product ${productId}.`);
    return this.store.createOrder(productId);
  }

  find(orderId: number): Order {
    const order = this.store.order(orderId);
    if (!order) throw new NotFoundException(`There is no order ${orderId}.`);
    return order;
  }

  /**
   * Pays a pending order under the order's lock, taken by hand with
   * LockService (its lease comes from the configuration). The lease is
   * extended while the payment runs; if this process stalls past it, another
   * instance can take over, and then this one's late write is refused by its
   * fencing token.
   */
  pay(orderId: number): Promise<Order> {
    // A lock that cannot be had reaches the client as 409 (with Retry-After) or 503:
    // the lock-context interceptor answers LockService's failures like @Locked()'s.
    return this.locks.using(`order:${orderId}`, (lock) => this.capture(orderId, lock), {
      ttl: this.config.orderLockTtlMs,
    });
  }

  private async capture(orderId: number, lock: Lock): Promise<Order> {
    const token = lock.token!;
    // The read claims the order with the token: a holder paused since its read cannot mark it paid
    // any more once this one has read it.
    const read = this.store.claimOrder(orderId, token, this.config.instance);
    if (!read) throw new NotFoundException(`There is no order ${orderId}.`);
    if (!read.written) throw new StaleTokenException(`order ${orderId}`, read);
    const order = read.value;
    if (order.status === 'paid') throw new AlreadyPaidException(orderId, order.paidBy);
    this.logger.log(
      `order ${orderId}: holding ${lock.resources[0]} with fencing token ${token}, charging the card`,
    );
    const paymentRef = await this.payments.charge(`order-${orderId}`, this.config.orderPaymentMs);
    const write = this.store.payOrder({
      orderId,
      paymentRef,
      instance: this.config.instance,
      token,
    });
    if (!write.written) {
      this.logger.warn(
        `order ${orderId}: write with fencing token ${token} refused, a newer lock holder claimed the order with token ${write.lastToken}`,
      );
      throw new StaleTokenException(`order ${orderId}`, write);
    }
    this.logger.log(`order ${orderId}: paid with fencing token ${token}`);
    return write.value;
  }
}
