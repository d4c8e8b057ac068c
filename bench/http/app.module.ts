import {
  Controller,
  Get,
  Inject,
  Injectable,
  Module,
  Param,
  UseInterceptors,
  type DynamicModule,
  type OnModuleDestroy,
  type OnModuleInit,
} from '@nestjs/common';
import Database from 'better-sqlite3';
import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  FencingToken,
  Locked,
  LockContextInterceptor,
  LockService,
  RedisLockModule,
  type LockNodeSpec,
} from '../../lib/index.js';
import { sqliteFence, type SqliteFencedTable } from '../../lib/fenced/index.js';
import type { ContenderSession } from '../contenders/contender.js';
import { rawFloorContender } from '../contenders/raw-floor.contender.js';

/** A small JSON answer, the same for both endpoints. */
interface Item {
  readonly id: string;
  readonly ok: true;
}

/** A row the write endpoints count requests in, fenced by `last_token` for the locked one. */
interface ItemRow extends Record<string, unknown> {
  id: string;
  hits: number;
  last_token: number;
}

/**
 * The write endpoints' SQLite file, kept the way the sample keeps its shop
 * (WAL, synchronous NORMAL): one row per item, created on its first request.
 * The unlocked write is an upsert and an UPDATE; the locked one the same
 * upsert, then the fenced read-modify-write a lock holder does (a claim that
 * registers the token, a write where the row still carries it).
 */
@Injectable()
export class ItemStore implements OnModuleDestroy {
  private readonly file = join(tmpdir(), `bench-items-${process.pid}.sqlite`);
  private readonly db = new Database(this.file);
  private readonly insert;
  private readonly bump;
  private readonly fenced: SqliteFencedTable<ItemRow>;

  constructor() {
    this.db.pragma('journal_mode = WAL');
    this.db.pragma('synchronous = NORMAL');
    this.db.exec(
      'CREATE TABLE IF NOT EXISTS items (id TEXT PRIMARY KEY, hits INTEGER NOT NULL, last_token INTEGER NOT NULL DEFAULT 0)',
    );
    this.insert = this.db.prepare('INSERT OR IGNORE INTO items (id, hits) VALUES (?, 0)');
    this.bump = this.db.prepare('UPDATE items SET hits = hits + 1 WHERE id = ? RETURNING hits');
    this.fenced = sqliteFence<ItemRow>(this.db, { table: 'items' });
  }

  write(id: string): number {
    this.insert.run(id);
    return (this.bump.get(id) as { hits: number }).hits;
  }

  fencedWrite(id: string, token: number): number {
    this.insert.run(id);
    return this.fenced.update({ id }, token, (row) => ({ hits: row.hits + 1 })).hits;
  }

  onModuleDestroy(): void {
    this.db.close();
    for (const suffix of ['', '-wal', '-shm']) rmSync(this.file + suffix, { force: true });
  }
}

const FLOOR_URLS = Symbol('FLOOR_URLS');

/**
 * The cheapest lock there is on Redis, and no library: the bench's raw floor
 * (`SET key value NX PX` on every node, then a compare-and-delete script, each
 * round done at a majority), on clients of its own to the same nodes. Whatever
 * a lock library does costs at least this; the write under it is the most an
 * endpoint that locks can keep of the unlocked write.
 */
@Injectable()
export class FloorLock implements OnModuleInit, OnModuleDestroy {
  private session: ContenderSession | undefined;

  constructor(@Inject(FLOOR_URLS) private readonly urls: readonly string[]) {}

  async onModuleInit(): Promise<void> {
    this.session = await rawFloorContender(false).open(this.urls, { mode: 'try', ttl: 10_000 });
  }

  async using<T>(key: string, work: () => T): Promise<T> {
    const session = this.session!;
    const handle = await session.acquire(key);
    try {
      return work();
    } finally {
      await session.release(handle, key);
    }
  }

  onModuleDestroy(): Promise<void> | undefined {
    return this.session?.close();
  }
}

/** An answer of the write endpoints: the item's count after this request. */
interface Written extends Item {
  readonly hits: number;
}

/**
 * Endpoints in pairs that differ only in the lock: `plain` and `locked` (a
 * small JSON answer, with `@Locked()` or without), `locked` and `by-hand`
 * (`@Locked()` against `LockService.using()` in the handler), and the writes
 * `write/plain` and `write/locked` (an SQLite write; the locked one fenced by
 * the lock's token), and `write/floor` (the plain write under the raw floor's
 * lock, no library: what any lock leaves of the write). All are async so that the difference is the lock, not a
 * Promise. With `ownInterceptor`, for
 * `contextInterceptor: false`, the locked handler applies the lock-context
 * interceptor itself, as docs/errors.md suggests for that set-up: the other
 * handler then runs without any interceptor.
 */
function itemsController(ownInterceptor: boolean) {
  @Controller()
  class ItemsController {
    constructor(
      @Inject(LockService) readonly locks: LockService,
      @Inject(ItemStore) readonly store: ItemStore,
      @Inject(FloorLock) readonly floor: FloorLock,
    ) {}

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

    /** What `@Locked('item:<0>')` does, written out: the decorator's cost is the difference. */
    @Get('by-hand/:id')
    async byHand(@Param('id') id: string): Promise<Item> {
      return this.locks.using(`item:${id}`, async () => ({ id, ok: true }));
    }

    @Get('write/plain/:id')
    async writePlain(@Param('id') id: string): Promise<Written> {
      return { id, ok: true, hits: this.store.write(id) };
    }

    @Get('write/locked/:id')
    @Locked('item:<0>')
    async writeLocked(@Param('id') id: string, @FencingToken() token?: number): Promise<Written> {
      return { id, ok: true, hits: this.store.fencedWrite(id, token!) };
    }

    /** The plain write under the raw floor's lock: the bound for any lock on this endpoint. */
    @Get('write/floor/:id')
    async writeFloor(@Param('id') id: string): Promise<Written> {
      return this.floor.using(`item:${id}`, () => ({ id, ok: true, hits: this.store.write(id) }));
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
   * With `urls` and `nodes` (the same nodes, as URLs and as the engine's
   * specs): RedisLockModule with its defaults (auto-extension, the
   * lock-context interceptor on every handler unless `contextInterceptor` is
   * false, fencing, release notifications), and the raw floor's lock on
   * clients of its own. Without: no lock module at all, the unlocked baseline.
   */
  static register(
    urls: readonly string[] | undefined,
    nodes: readonly LockNodeSpec[] | undefined,
    contextInterceptor = true,
  ): DynamicModule {
    if (!urls || !nodes) return { module: BenchAppModule, controllers: [PlainOnlyController] };
    return {
      module: BenchAppModule,
      imports: [RedisLockModule.forRoot({ nodes, logger, contextInterceptor })],
      controllers: [contextInterceptor ? ItemsController : OptOutItemsController],
      providers: [ItemStore, FloorLock, { provide: FLOOR_URLS, useValue: urls }],
    };
  }
}
