import { Inject, Injectable, Logger, NotFoundException } from '@nestjs/common';
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
  private readonly logger = new Logger('Checkout');

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
   * the lock-context interceptor. The read claims the product's row with the
   * fencing token and the write needs that claim to stand, so a holder that
   * lost its lock after reading cannot write a stock computed from a stale read.
   */
  @Locked('product:<0>', { wait: 1000 })
  purchase(productId: number, @FencingToken() token?: number): Promise<Sale> {
    return this.sell(productId, token);
  }

  /** The same steps without a lock: what the demo runs first, to show the oversell. */
  purchaseUnlocked(productId: number): Promise<Sale> {
    return this.sell(productId, undefined);
  }

  /** Read the stock (claiming it, under the lock), charge the buyer (slow), write the sale. */
  private async sell(productId: number, token: number | undefined): Promise<Sale> {
    const { instance, stockWrites } = this.config;
    const product =
      token !== undefined && stockWrites === 'claimed'
        ? this.claim(productId, token)
        : this.inStock(productId);
    if (product.stock <= 0) throw new SoldOutException(productId);
    if (token !== undefined) {
      this.logger.log(
        `product ${productId}: holding product:${productId} with fencing token ${token}, read stock ${product.stock}, charging`,
      );
    }
    const paymentRef = await this.payments.charge(`product-${productId}`, this.config.paymentMs);
    const write = this.store.recordSale({
      productId,
      stock: product.stock - 1,
      paymentRef,
      instance,
      // `unfenced` (a demo contrast) writes as if there were no token.
      token: stockWrites === 'unfenced' ? undefined : token,
      writes: stockWrites === 'write-only' ? 'write-only' : 'claimed',
    });
    if (!write.written) {
      this.logger.warn(
        `product ${productId}: write with fencing token ${token} refused, a newer lock holder claimed the row with token ${write.lastToken}`,
      );
      throw new StaleTokenException(`product ${productId}`, write);
    }
    return { orderId: write.value.id, productId, stockLeft: product.stock - 1, token, instance };
  }

  /** The product read under the lock, its row claimed with the token. */
  private claim(productId: number, token: number): Product {
    const read = this.store.claimProduct(productId, token, this.config.instance);
    if (!read.written) throw new StaleTokenException(`product ${productId}`, read);
    return read.value;
  }

  private inStock(productId: number): Product {
    const product = this.store.product(productId);
    if (!product) throw new NotFoundException(`There is no product ${productId}.`);
    if (product.stock <= 0) throw new SoldOutException(productId);
    return product;
  }
}
