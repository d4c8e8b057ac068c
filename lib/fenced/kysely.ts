import type { Kysely } from 'kysely';
import { AsyncFencedTable } from './async-fenced-table.js';
import { FencedSql } from './fenced-sql.js';
import type { FencedRow, FencedTable, FencedTableOptions, SqlDialect } from './fenced-types.js';

export interface KyselyFenceOptions extends FencedTableOptions {
  /** The dialect the Kysely instance was created with: `PostgresDialect` or `SqliteDialect`. */
  readonly dialect: SqlDialect;
}

type CompiledQueryClass = typeof import('kysely').CompiledQuery;
let compiledQuery: Promise<CompiledQueryClass> | undefined;

/**
 * Fenced rows of a table through Kysely: a `Kysely` instance or a
 * transaction (`db.transaction().execute(trx => ...)`).
 *
 * ```ts
 * const products = kyselyFence<Product>(db, { table: 'products', dialect: 'postgres' });
 * await products.update({ id: 7 }, lock.token!, (p) => ({ stock: p.stock - 1 }));
 * ```
 *
 * Kysely is loaded on the first statement, from the application's own
 * install: this package does not depend on it.
 */
export function kyselyFence<R extends FencedRow = FencedRow>(
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- any schema: the table is named at run time
  db: Kysely<any>,
  options: KyselyFenceOptions,
): FencedTable<R> {
  const sql = new FencedSql(options?.dialect, options);
  return new AsyncFencedTable<R>(sql, async ({ sql: text, params }) => {
    compiledQuery ??= import('kysely').then(
      (kysely) => kysely.CompiledQuery,
      (error: unknown) => {
        compiledQuery = undefined; // installed later, or a passing failure: try again next time
        throw error;
      },
    );
    const query = (await compiledQuery).raw(text, params);
    return (await db.executeQuery<FencedRow>(query)).rows;
  });
}
