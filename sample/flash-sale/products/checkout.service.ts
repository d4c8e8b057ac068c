import { Inject, Injectable, NotFoundException } from '@nestjs/common';
import { FencingToken, Locked } from 'nestjs-redis-lock';
import { flashSaleConfig, type FlashSaleConfig } from '../flash-sale.config.js';
import { SoldOutException, StaleTokenException } from '../flash-sale.errors.js';
import { PaymentsService } from '../payments/payments.service.js';
import { FlashSaleStore, type Product } from '../store/flash-sale.store.js';

/** What a buyer gets back from a purchase. */
export interface Sale {
  readonly orderId: number;
  readonly productId: number;
  readonly stockLeft: number;
  /** The fencing token the sale was written with; absent without a lock. */
  readonly token?: number;
  readonly instance: string;
}

@Injectable()
export class CheckoutService {
  constructor(
    private readonly store: FlashSaleStore,
    private readonly payments: PaymentsService,
    @Inject(flashSaleConfig.KEY) private readonly config: FlashSaleConfig,
  ) {}

  /**
   * One buyer pressing "buy". A stock of 0 is answered at once, without the
   * lock (nothing can be oversold by saying no); everything else goes through
   * the locked purchase, or the unlocked one with LOCKS=off.
   */
  buy(productId: number): Promise<Sale> {
    this.inStock(productId);
    return this.config.locks ? this.purchase(productId) : this.purchaseUnlocked(productId);
  }

  /**
   * Sells one unit while holding the product's lock, granted by a majority of
   * the Redis nodes whichever instance asks. The stock is read again under
   * the lock. A buyer who finds another buyer's checkout holding the item
   * waits up to a second (backing off), then gets 409 with Retry-After from
   * the lock-context interceptor. The fencing token goes with the write, so a
   * holder that lost its lock cannot overwrite a newer sale.
   */
  @Locked('product:<0>', { wait: 1000 })
  purchase(productId: number, @FencingToken() token?: number): Promise<Sale> {
    return this.sell(productId, token);
  }

  /** The same steps without a lock: what the demo runs first, to show the oversell. */
  purchaseUnlocked(productId: number): Promise<Sale> {
    return this.sell(productId, undefined);
  }

  /** Read the stock, charge the buyer (slow), write the sale. */
  private async sell(productId: number, token: number | undefined): Promise<Sale> {
    const { stock } = this.inStock(productId);
    const paymentRef = await this.payments.charge(`product-${productId}`, this.config.paymentMs);
    const { instance } = this.config;
    const write = this.store.recordSale({
      productId,
      stock: stock - 1,
      paymentRef,
      instance,
      token,
    });
    if (!write.written) throw new StaleTokenException(`product ${productId}`, write);
    return { orderId: write.value.id, productId, stockLeft: stock - 1, token, instance };
  }

  private inStock(productId: number): Product {
    const product = this.store.product(productId);
    if (!product) throw new NotFoundException(`There is no product ${productId}.`);
    if (product.stock <= 0) throw new SoldOutException(productId);
    return product;
  }
}
