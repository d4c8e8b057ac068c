import {
  Controller,
  Get,
  Module,
  Param,
  UseInterceptors,
  type DynamicModule,
} from '@nestjs/common';
import {
  Locked,
  LockContextInterceptor,
  RedisLockModule,
  type LockNodeSpec,
} from '../../lib/index.js';

/** A small JSON answer, the same for both endpoints. */
interface Item {
  readonly id: string;
  readonly ok: true;
}

/**
 * Two endpoints that differ only in `@Locked()`. Both are async so that the
 * difference is the lock, not a Promise. With `ownInterceptor`, for
 * `contextInterceptor: false`, the locked handler applies the lock-context
 * interceptor itself, as docs/errors.md suggests for that set-up: the other
 * handler then runs without any interceptor.
 */
function itemsController(ownInterceptor: boolean) {
  @Controller()
  class ItemsController {
    @Get('plain/:id')
    async plain(@Param('id') id: string): Promise<Item> {
      return { id, ok: true };
    }

    @Get('locked/:id')
    @UseInterceptors(...(ownInterceptor ? [LockContextInterceptor] : []))
    @Locked('item:<0>')
    async locked(@Param('id') id: string): Promise<Item> {
      return { id, ok: true };
    }
  }
  return ItemsController;
}

export const ItemsController = itemsController(false);
export const OptOutItemsController = itemsController(true);

/** Only the unlocked endpoint, in an app without RedisLockModule (no lock-context interceptor). */
@Controller()
export class PlainOnlyController {
  @Get('plain/:id')
  async plain(@Param('id') id: string): Promise<Item> {
    return { id, ok: true };
  }
}

/** Warnings about the bench's nodes (appendonly no, on purpose) are not news; errors are. */
const logger = {
  warn: () => undefined,
  error: (message: string) => console.error(`[redis-lock] ${message}`),
};

@Module({})
export class BenchAppModule {
  /**
   * With `nodes`: RedisLockModule with its defaults (auto-extension, the
   * lock-context interceptor on every handler unless `contextInterceptor` is
   * false, fencing, release notifications). Without: no lock module at all,
   * the unlocked baseline.
   */
  static register(
    nodes: readonly LockNodeSpec[] | undefined,
    contextInterceptor = true,
  ): DynamicModule {
    if (!nodes) return { module: BenchAppModule, controllers: [PlainOnlyController] };
    return {
      module: BenchAppModule,
      imports: [RedisLockModule.forRoot({ nodes, logger, contextInterceptor })],
      controllers: [contextInterceptor ? ItemsController : OptOutItemsController],
    };
  }
}
