import { Controller, Get, Module, Param, type DynamicModule } from '@nestjs/common';
import { Locked, RedisLockModule, type LockNodeSpec } from '../../lib/index.js';

/** A small JSON answer, the same for both endpoints. */
interface Item {
  readonly id: string;
  readonly ok: true;
}

/**
 * Two endpoints that differ only in `@Locked()`. Both are async so that the
 * difference is the lock, not a Promise.
 */
@Controller()
export class ItemsController {
  @Get('plain/:id')
  async plain(@Param('id') id: string): Promise<Item> {
    return { id, ok: true };
  }

  @Get('locked/:id')
  @Locked('item:<0>')
  async locked(@Param('id') id: string): Promise<Item> {
    return { id, ok: true };
  }
}

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
   * lock-context interceptor on every handler, fencing, release
   * notifications). Without: no lock module at all, the unlocked baseline.
   */
  static register(nodes: readonly LockNodeSpec[] | undefined): DynamicModule {
    return nodes
      ? {
          module: BenchAppModule,
          imports: [RedisLockModule.forRoot({ nodes, logger })],
          controllers: [ItemsController],
        }
      : { module: BenchAppModule, controllers: [PlainOnlyController] };
  }
}
