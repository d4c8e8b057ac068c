import type { DataSource, EntityManager } from 'typeorm';
import { LockOptionsError } from '../engine/lock-errors.js';
import { AsyncFencedTable } from './async-fenced-table.js';
import { FencedSql } from './fenced-sql.js';
import type { FencedRow, FencedTable, FencedTableOptions, SqlDialect } from './fenced-types.js';

/** TypeORM driver types and the dialect of their SQL. */
const DIALECTS: Readonly<Record<string, SqlDialect>> = {
  postgres: 'postgres',
  'aurora-postgres': 'postgres',
  'better-sqlite3': 'sqlite',
  sqlite: 'sqlite',
  sqljs: 'sqlite',
};

/**
 * Fenced rows of a table through TypeORM: a `DataSource`, or the
 * `EntityManager` of a transaction (`dataSource.transaction(manager => ...)`),
 * whose connection the statements then use. PostgreSQL and SQLite drivers.
 *
 * ```ts
 * const products = typeormFence<Product>(dataSource, { table: 'products' });
 * await products.update({ id: 7 }, lock.token!, (p) => ({ stock: p.stock - 1 }));
 * ```
 *
 * TypeORM is not loaded by this package: pass your own instance. An entity's
 * token column: `@Column({ type: 'bigint', default: 0 })` in PostgreSQL.
 */
export function typeormFence<R extends FencedRow = FencedRow>(
  db: DataSource | EntityManager,
  options: FencedTableOptions,
): FencedTable<R> {
  const manager = isManager(db) ? db : undefined;
  // EntityManager.connection is TypeORM 0.3's name for dataSource.
  const source = manager
    ? (manager.dataSource ?? (manager as unknown as { connection: DataSource }).connection)
    : (db as DataSource);
  const type = String(source?.options?.type);
  const dialect = DIALECTS[type];
  if (!dialect) {
    throw new LockOptionsError(
      `typeormFence() speaks PostgreSQL and SQLite; this DataSource is '${type}'. ` +
        'Run the statements shown in docs/fencing.md (in the repository) through dataSource.query() instead.',
    );
  }
  return new AsyncFencedTable<R>(new FencedSql(dialect, options), async ({ sql, params }) => {
    // In a transaction, its query runner; otherwise one of the pool's for this statement.
    const own =
      manager?.queryRunner && !manager.queryRunner.isReleased
        ? undefined
        : source.createQueryRunner();
    const runner = own ?? manager!.queryRunner!;
    try {
      const result = await runner.query(sql, params, true);
      return (result.records ?? []) as FencedRow[];
    } finally {
      if (own) await own.release();
    }
  });
}

function isManager(db: DataSource | EntityManager): db is EntityManager {
  return typeof (db as DataSource).createQueryRunner !== 'function';
}
