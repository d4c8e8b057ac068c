import { AsyncFencedTable } from './async-fenced-table.js';
import { FencedSql } from './fenced-sql.js';
import type { FencedRow, FencedTable, FencedTableOptions } from './fenced-types.js';

/**
 * What the PostgreSQL adapter needs of `pg`: a `Pool`, a `Client` or a
 * `PoolClient` taken for a transaction (the fenced statements then run in it).
 * Typed by shape, so this package needs no types of `pg` and never loads it.
 */
export interface PgQueryable {
  query(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
}

/**
 * Fenced rows of a PostgreSQL table through node-postgres (`pg`).
 *
 * ```ts
 * const products = pgFence<Product>(pool, { table: 'products' });
 * const product = await products.claim({ id: 7 }, lock.token!);
 * await products.write({ id: 7 }, lock.token!, { stock: product.stock - 1 });
 * ```
 *
 * The token column must be `bigint` (or `numeric`), which `pg` returns as a string.
 */
export function pgFence<R extends FencedRow = FencedRow>(
  client: PgQueryable,
  options: FencedTableOptions,
): FencedTable<R> {
  const sql = new FencedSql('postgres', options);
  return new AsyncFencedTable<R>(
    sql,
    async ({ sql: text, params }) => (await client.query(text, params)).rows as FencedRow[],
  );
}
