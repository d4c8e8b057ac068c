/**
 * The SQL helpers of `nestjs-redis-lock/fenced` against real databases: a
 * PostgreSQL server started for this file (test/support/postgres.ts) and SQLite
 * files, through each adapter: pg, better-sqlite3, TypeORM and Kysely on both.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import Database from 'better-sqlite3';
import { Kysely, PostgresDialect, SqliteDialect } from 'kysely';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { DataSource } from 'typeorm';
import { LockError, LockOptionsError } from '../../lib/engine/index.js';
import {
  FencedColumnError,
  FencedRowMissingError,
  FencedRowNotClaimedError,
  FencedValueChangedError,
  FencedWriteError,
  FencedWriteRejectedError,
  kyselyFence,
  pgFence,
  sqliteFence,
  typeormFence,
  type FencedTable,
  type FencedTableOptions,
  type SqlDialect,
} from '../../lib/fenced/index.js';
import { ignoreShutdownErrors, startPostgres, type PostgresServer } from '../support/postgres.js';

interface Product extends Record<string, unknown> {
  id: number;
  stock: number;
  note: string | null;
  last_token: number | string;
}

/** One way into one database: how to make a fenced table, and how to run plain SQL. */
interface Store {
  readonly name: string;
  readonly dialect: SqlDialect;
  fence(options: FencedTableOptions): FencedTable<Product>;
  exec(sql: string): Promise<void>;
  rows(sql: string): Promise<Record<string, unknown>[]>;
  /** Runs `work` on a fenced table bound to a transaction that is then rolled back. */
  rolledBack(
    options: FencedTableOptions,
    work: (table: FencedTable<Product>) => Promise<void>,
  ): Promise<void>;
}

const ROLLBACK = new Error('roll back');

let server: PostgresServer;
let pool: pg.Pool;
let dir: string;
let sqlite: Database.Database;
let typeormPg: DataSource;
let typeormSqlite: DataSource;
// Any schema: the tables are created as the tests go.
type AnyKysely = Kysely<Record<string, Record<string, unknown>>>;
let kyselyPg: AnyKysely;
let kyselySqlite: AnyKysely;

beforeAll(async () => {
  [server, dir] = await Promise.all([startPostgres(), mkdtemp(join(tmpdir(), 'fenced-sqlite-'))]);
  pool = ignoreShutdownErrors(new pg.Pool({ ...server.connection, max: 4 }));
  sqlite = new Database(join(dir, 'plain.sqlite'));
  typeormPg = new DataSource({
    type: 'postgres',
    ...server.connection,
    username: server.user,
    extra: { max: 2 },
  });
  typeormSqlite = new DataSource({ type: 'better-sqlite3', database: join(dir, 'typeorm.sqlite') });
  await Promise.all([typeormPg.initialize(), typeormSqlite.initialize()]);
  kyselyPg = new Kysely({
    dialect: new PostgresDialect({
      pool: ignoreShutdownErrors(new pg.Pool({ ...server.connection, max: 2 })),
    }),
  });
  kyselySqlite = new Kysely({
    dialect: new SqliteDialect({ database: new Database(join(dir, 'kysely.sqlite')) }),
  });
}, 60_000);

afterAll(async () => {
  await Promise.allSettled([
    pool?.end(),
    typeormPg?.isInitialized && typeormPg.destroy(),
    typeormSqlite?.isInitialized && typeormSqlite.destroy(),
    kyselyPg?.destroy(),
    kyselySqlite?.destroy(),
  ]);
  sqlite?.close();
  await server?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

const stores: Store[] = [
  {
    name: 'pg',
    dialect: 'postgres',
    fence: (options) => pgFence<Product>(pool, options),
    exec: async (sql) => void (await pool.query(sql)),
    rows: async (sql) => (await pool.query(sql)).rows,
    async rolledBack(options, work) {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        await work(pgFence<Product>(client, options));
      } finally {
        await client.query('ROLLBACK');
        client.release();
      }
    },
  },
  {
    name: 'better-sqlite3',
    dialect: 'sqlite',
    fence: (options) => asAsync(sqliteFence<Product>(sqlite, options)),
    exec: async (sql) => void sqlite.exec(sql),
    rows: async (sql) => sqlite.prepare(sql).all() as Record<string, unknown>[],
    async rolledBack(options, work) {
      // better-sqlite3 transactions are synchronous: the fenced calls compose inside one.
      const table = sqliteFence<Product>(sqlite, options);
      const inTransaction = sqlite.transaction(() => {
        const row = table.claim({ id: 1 }, 1000);
        table.write({ id: 1 }, 1000, { stock: row.stock - 1 });
        throw ROLLBACK;
      });
      expect(() => inTransaction()).toThrow(ROLLBACK);
      void work;
    },
  },
  ...(['postgres', 'sqlite'] as const).flatMap((dialect): Store[] => {
    const source = () => (dialect === 'postgres' ? typeormPg : typeormSqlite);
    const db = () => (dialect === 'postgres' ? kyselyPg : kyselySqlite);
    return [
      {
        name: `typeorm (${dialect})`,
        dialect,
        fence: (options) => typeormFence<Product>(source(), options),
        exec: async (sql) => void (await source().query(sql)),
        rows: async (sql) => (await source().query(sql)) as Record<string, unknown>[],
        rolledBack: (options, work) =>
          source()
            .transaction((manager) =>
              work(typeormFence<Product>(manager, options)).then(() => {
                throw ROLLBACK;
              }),
            )
            .catch((error: unknown) => {
              if (error !== ROLLBACK) throw error;
            }),
      },
      {
        name: `kysely (${dialect})`,
        dialect,
        fence: (options) => kyselyFence<Product>(db(), { ...options, dialect }),
        exec: async (sql) => void (await rawKysely(db(), sql)),
        rows: (sql) => rawKysely(db(), sql),
        rolledBack: (options, work) =>
          db()
            .transaction()
            .execute((trx) =>
              work(kyselyFence<Product>(trx, { ...options, dialect })).then(() => {
                throw ROLLBACK;
              }),
            )
            .catch((error: unknown) => {
              if (error !== ROLLBACK) throw error;
            }),
      },
    ];
  }),
];

async function rawKysely(db: AnyKysely, sql: string): Promise<Record<string, unknown>[]> {
  const { CompiledQuery } = await import('kysely');
  return (await db.executeQuery<Record<string, unknown>>(CompiledQuery.raw(sql, []))).rows;
}

/** The synchronous SQLite table behind the async interface the other adapters share. */
function asAsync(table: ReturnType<typeof sqliteFence<Product>>): FencedTable<Product> {
  return {
    claim: async (key, token) => table.claim(key, token),
    write: async (key, token, values, options) => table.write(key, token, values, options),
    update: async (key, token, change) => {
      const row = table.claim(key, token);
      return table.write(key, token, await change(row));
    },
    verify: async () => table.verify(),
  };
}

let tables = 0;

/** A fresh table with product 1 (10 in stock), its token column of the given type. */
async function productsTable(store: Store, tokenType?: string): Promise<string> {
  const name = `products_${++tables}`;
  const type = tokenType ?? (store.dialect === 'postgres' ? 'bigint' : 'INTEGER');
  await store.exec(
    `CREATE TABLE ${name} (id integer PRIMARY KEY, stock integer NOT NULL, note text, last_token ${type} NOT NULL DEFAULT 0)`,
  );
  await store.exec(`INSERT INTO ${name} (id, stock) VALUES (1, 10)`);
  return name;
}

async function stockOf(store: Store, table: string): Promise<{ stock: number; token: number }> {
  const [row] = await store.rows(`SELECT stock, last_token FROM ${table} WHERE id = 1`);
  return { stock: Number(row!.stock), token: Number(row!.last_token) };
}

describe.each(stores)('fenced rows through $name', (store) => {
  it('reads with a claim and writes where the claim still stands', async () => {
    const name = await productsTable(store);
    const table = store.fence({ table: name });
    const row = await table.claim({ id: 1 }, 7);
    expect(row).toMatchObject({ id: 1, stock: 10 });
    expect(Number(row.last_token)).toBe(7);
    const written = await table.write({ id: 1 }, 7, { stock: row.stock - 1, note: 'sold' });
    expect(written).toMatchObject({ id: 1, stock: 9, note: 'sold' });
    // The same holder again, under the same token: its own claim does not stand in its way.
    await table.update({ id: 1 }, 7, (p) => ({ stock: p.stock - 1 }));
    expect(await stockOf(store, name)).toEqual({ stock: 8, token: 7 });
  });

  it('refuses the write of a holder paused after its read once a newer holder has read: the update write-only fencing loses', async () => {
    const name = await productsTable(store);
    const table = store.fence({ table: name });
    const zombie = await table.claim({ id: 1 }, 100); // reads 10, then is paused past its lease
    const next = await table.claim({ id: 1 }, 101); // the next holder reads 10 too
    const refused = await table.write({ id: 1 }, 100, { stock: zombie.stock - 1 }).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(refused).toBeInstanceOf(FencedWriteRejectedError);
    expect(refused).toBeInstanceOf(FencedWriteError);
    expect(refused).toBeInstanceOf(LockError);
    expect(refused).toMatchObject({
      code: 'FENCED_WRITE_REJECTED',
      token: 100,
      newerToken: 101,
      action: 'write',
      target: `${name} (id = 1)`,
    });
    expect((refused as Error).message).toContain('fencing token 100');
    expect((refused as Error).message).toContain('token 101');
    await table.write({ id: 1 }, 101, { stock: next.stock - 1 });
    expect(await stockOf(store, name)).toEqual({ stock: 9, token: 101 });
  });

  it('refuses a claim with a token older than the one on the row, and changes nothing', async () => {
    const name = await productsTable(store);
    const table = store.fence({ table: name });
    await table.update({ id: 1 }, 50, (p) => ({ stock: p.stock - 3 }));
    await expect(table.claim({ id: 1 }, 49)).rejects.toMatchObject({
      name: 'FencedWriteRejectedError',
      token: 49,
      newerToken: 50,
      action: 'claim',
    });
    expect(await stockOf(store, name)).toEqual({ stock: 7, token: 50 });
  });

  it('refuses a write that was never claimed, naming the token the row carries', async () => {
    const name = await productsTable(store);
    const table = store.fence({ table: name });
    await table.claim({ id: 1 }, 5);
    const error = await table.write({ id: 1 }, 6, { stock: 0 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(FencedRowNotClaimedError);
    expect(error).toMatchObject({ code: 'FENCED_ROW_NOT_CLAIMED', token: 6, rowToken: 5 });
    expect((error as Error).message).toContain('claim()');
    expect(await stockOf(store, name)).toEqual({ stock: 10, token: 5 });
  });

  it('writes on condition of the values read (expect), and refuses when they changed or a newer token claimed the row', async () => {
    const name = await productsTable(store);
    const table = store.fence({ table: name });
    await table.write({ id: 1 }, 20, { stock: 9 }, { expect: { stock: 10 } });
    const changed = await table
      .write({ id: 1 }, 21, { stock: 9 }, { expect: { stock: 10 } })
      .catch((e: unknown) => e);
    expect(changed).toBeInstanceOf(FencedValueChangedError);
    expect(changed).toMatchObject({ token: 21, expected: { stock: 10 }, actual: { stock: 9 } });
    await table.write({ id: 1 }, 22, { note: 'x' }, { expect: { note: null } });
    await expect(
      table.write({ id: 1 }, 19, { stock: 8 }, { expect: { stock: 9 } }),
    ).rejects.toMatchObject({ name: 'FencedWriteRejectedError', token: 19, newerToken: 22 });
    expect(await stockOf(store, name)).toEqual({ stock: 9, token: 22 });
  });

  it('writes statements of every shape on one table with their own values, and checks each name every time', async () => {
    const name = await productsTable(store);
    const table = store.fence({ table: name });
    // Each table keeps a statement's text per shape (the columns it names): the same shape twice,
    // then others, each with its values in their places.
    await table.claim({ id: 1 }, 30);
    await table.write({ id: 1 }, 30, { stock: 8 });
    await table.write({ id: 1 }, 30, { stock: 7 });
    expect(await table.write({ id: 1 }, 30, { note: 'a', stock: 6 })).toMatchObject({
      stock: 6,
      note: 'a',
    });
    expect(await table.write({ id: 1 }, 31, { note: 'b' }, { expect: { stock: 6 } })).toMatchObject(
      { stock: 6, note: 'b' },
    );
    expect(
      await table.write({ id: 1 }, 32, { stock: 5 }, { expect: { note: 'b', stock: 6 } }),
    ).toMatchObject({ stock: 5, note: 'b' });
    expect(await stockOf(store, name)).toEqual({ stock: 5, token: 32 });
    // A name that would join two known columns in the text is refused as before, not found there.
    await expect(
      table.write({ id: 1 }, 32, { 'note,stock': 1 } as Partial<Product>),
    ).rejects.toThrow(/a column to write must be a plain SQL name/);
    await expect(table.claim({ 'id,': 1 } as unknown as { id: number }, 33)).rejects.toThrow(
      /a key column must be a plain SQL name/,
    );
    expect(await stockOf(store, name)).toEqual({ stock: 5, token: 32 });
  });

  it('refuses a row that does not exist', async () => {
    const table = store.fence({ table: await productsTable(store) });
    await expect(table.claim({ id: 404 }, 1)).rejects.toBeInstanceOf(FencedRowMissingError);
    await expect(table.write({ id: 404 }, 1, { stock: 1 })).rejects.toMatchObject({
      code: 'FENCED_ROW_MISSING',
    });
  });

  it('keeps tokens up to 2^53 exact', async () => {
    const name = await productsTable(store);
    const table = store.fence({ table: name });
    const big = Number.MAX_SAFE_INTEGER - 1;
    await table.update({ id: 1 }, big, (p) => ({ stock: p.stock - 1 }));
    await expect(table.claim({ id: 1 }, big - 1)).rejects.toMatchObject({
      token: big - 1,
      newerToken: big,
    });
    await table.update({ id: 1 }, big + 1, (p) => ({ stock: p.stock - 1 }));
    expect(await stockOf(store, name)).toEqual({ stock: 8, token: Number.MAX_SAFE_INTEGER });
  });

  it('refuses a token column that cannot hold the tokens, and accepts one that can', async () => {
    const narrow =
      store.dialect === 'postgres'
        ? ['integer', 'text', 'numeric(12, 0)', 'double precision']
        : ['TEXT', 'REAL', 'BLOB'];
    for (const type of narrow) {
      const table = store.fence({ table: await productsTable(store, type) });
      const error = await table.claim({ id: 1 }, 1).catch((e: unknown) => e);
      expect({ type, error }).toEqual({ type, error: expect.any(FencedColumnError) });
      expect((error as Error).message).toMatch(store.dialect === 'postgres' ? /bigint/ : /INTEGER/);
    }
    const wide =
      store.dialect === 'postgres'
        ? ['bigint', 'numeric', 'numeric(20, 0)']
        : ['BIGINT', 'INT', 'NUMERIC'];
    for (const type of wide) {
      const table = store.fence({ table: await productsTable(store, type) });
      await expect(table.verify()).resolves.toBeUndefined();
    }
    const missing = store.fence({ table: await productsTable(store), tokenColumn: 'fence' });
    await expect(missing.claim({ id: 1 }, 1)).rejects.toThrow(/has no column fence/);
  });

  it('runs in the caller’s transaction: a rollback takes the claim and the write back', async () => {
    const name = await productsTable(store);
    // SQLite's store claims id 1 with 1000 inside its own synchronous transaction.
    await store.rolledBack({ table: name }, async (table) => {
      const row = await table.claim({ id: 1 }, 1000);
      await table.write({ id: 1 }, 1000, { stock: row.stock - 1 });
    });
    expect(await stockOf(store, name)).toEqual({ stock: 10, token: 0 });
  });

  it('refuses what it cannot run safely, with messages that say what to change', async () => {
    expect(() => store.fence({ table: 'products; DROP TABLE x' })).toThrow(LockOptionsError);
    const table = store.fence({ table: await productsTable(store) });
    await expect(table.claim({ id: 1 }, undefined as unknown as number)).rejects.toThrow(
      /fencing: false, or from LockContext\.token read outside a locked call/,
    );
    await expect(table.claim({ id: 1 }, 0)).rejects.toThrow(/got 0\. A lock has no token when/);
    await expect(table.claim({}, 1)).rejects.toThrow(/name the row/);
    await expect(table.write({ id: 1 }, 1, { last_token: 5 } as Partial<Product>)).rejects.toThrow(
      /token column/,
    );
  });
});

describe('update() through better-sqlite3', () => {
  const store = stores.find(({ name }) => name === 'better-sqlite3')!;

  it('commits its claim and its write as one transaction: another connection sees neither until both', async () => {
    const name = await productsTable(store);
    const other = new Database(sqlite.name, { readonly: true });
    try {
      const seen: unknown[] = [];
      const written = sqliteFence<Product>(sqlite, { table: name }).update({ id: 1 }, 5, (row) => {
        seen.push(other.prepare(`SELECT stock, last_token FROM ${name} WHERE id = 1`).get());
        return { stock: row.stock - 1 };
      });
      expect(seen).toEqual([{ stock: 10, last_token: 0 }]);
      expect(written).toMatchObject({ stock: 9, last_token: 5 });
      expect(other.prepare(`SELECT stock, last_token FROM ${name} WHERE id = 1`).get()).toEqual({
        stock: 9,
        last_token: 5,
      });
    } finally {
      other.close();
    }
  });

  it('keeps the claim of a change that throws, and passes its error on', async () => {
    const name = await productsTable(store);
    const failure = new Error('payment declined');
    expect(() =>
      sqliteFence<Product>(sqlite, { table: name }).update({ id: 1 }, 6, () => {
        throw failure;
      }),
    ).toThrow(failure);
    expect(await stockOf(store, name)).toEqual({ stock: 10, token: 6 });
  });

  it('refuses a change that returns a Promise, which it would write as no values, keeping the claim', async () => {
    const name = await productsTable(store);
    const table = sqliteFence<Product>(sqlite, { table: name });
    const asyncChange = (async (row: Product) => ({ stock: row.stock - 1 })) as unknown as (
      row: Product,
    ) => Partial<Product>;
    expect(() => table.update({ id: 1 }, 4, asyncChange)).toThrow(
      /update\(\) is synchronous, as better-sqlite3 is: .* For async work, claim\(\), await the work, then write\(\)\./,
    );
    expect(await stockOf(store, name)).toEqual({ stock: 10, token: 4 });
    // One that fails later fails where nobody listens: it must not end the process.
    const failing = (async () => {
      throw new Error('late');
    }) as unknown as (row: Product) => Partial<Product>;
    let unhandled: unknown;
    const onUnhandled = (reason: unknown) => (unhandled = reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      expect(() => table.update({ id: 1 }, 5, failing)).toThrow(LockOptionsError);
      await new Promise((resolve) => setImmediate(resolve));
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
    expect(unhandled).toBeUndefined();
  });

  it('runs inside the caller’s transaction, whose rollback takes both back', async () => {
    const name = await productsTable(store);
    const table = sqliteFence<Product>(sqlite, { table: name });
    const sale = sqlite.transaction(() => {
      table.update({ id: 1 }, 8, (row) => ({ stock: row.stock - 1 }));
      throw ROLLBACK;
    });
    expect(() => sale()).toThrow(ROLLBACK);
    expect(await stockOf(store, name)).toEqual({ stock: 10, token: 0 });
  });

  it('runs an update made inside another’s change as its own, nested in the outer transaction', async () => {
    const name = await productsTable(store);
    await store.exec(`INSERT INTO ${name} (id, stock) VALUES (2, 20)`);
    const table = sqliteFence<Product>(sqlite, { table: name });
    const outer = table.update({ id: 1 }, 11, (row) => {
      const inner = table.update({ id: 2 }, 12, (other) => ({ stock: other.stock - 5 }));
      return { stock: row.stock - 1, note: `with ${inner.stock}` };
    });
    expect(outer).toMatchObject({ id: 1, stock: 9, note: 'with 15', last_token: 11 });
    const rows = await store.rows(`SELECT id, stock, last_token FROM ${name} ORDER BY id`);
    expect(rows.map((row) => [Number(row.id), Number(row.stock), Number(row.last_token)])).toEqual([
      [1, 9, 11],
      [2, 15, 12],
    ]);
  });

  it('works on a database whose transaction() wraps a function called with no arguments', async () => {
    const name = await productsTable(store);
    // A wrapper of the documented shape, `(fn: () => unknown) => () => unknown`, that passes
    // nothing through: update() must not count on the arguments better-sqlite3 would forward.
    const wrapped = {
      prepare: (source: string) => sqlite.prepare(source),
      transaction: (fn: () => unknown) => () => sqlite.transaction(() => fn())(),
    };
    const table = sqliteFence<Product>(wrapped, { table: name });
    expect(table.update({ id: 1 }, 13, (row) => ({ stock: row.stock - 3 }))).toMatchObject({
      stock: 7,
      last_token: 13,
    });
    expect(table.update({ id: 1 }, 14, (row) => ({ stock: row.stock - 3 }))).toMatchObject({
      stock: 4,
      last_token: 14,
    });
  });

  it('works on a database given as `prepare` alone, one statement at a time', async () => {
    const name = await productsTable(store);
    const bare = { prepare: (source: string) => sqlite.prepare(source) };
    const written = sqliteFence<Product>(bare, { table: name }).update({ id: 1 }, 9, (row) => ({
      stock: row.stock - 2,
    }));
    expect(written).toMatchObject({ stock: 8, last_token: 9 });
  });
});
