import { Module, type OnApplicationShutdown } from '@nestjs/common';
import { flashSaleConfig, type FlashSaleConfig } from '../flash-sale.config.js';
import { FlashSaleStore } from './flash-sale.store.js';

@Module({
  providers: [
    {
      provide: FlashSaleStore,
      inject: [flashSaleConfig.KEY],
      useFactory: (config: FlashSaleConfig) => {
        const store = FlashSaleStore.open(config.dbFile);
        // A fresh file gets something to sell; an existing product is left as it is.
        store.seed(1, 'Limited sneakers', 10);
        return store;
      },
    },
  ],
  exports: [FlashSaleStore],
})
export class StoreModule implements OnApplicationShutdown {
  constructor(private readonly store: FlashSaleStore) {}

  onApplicationShutdown(): void {
    this.store.close();
  }
}
