import { LockOptionsError } from '../engine/lock-errors.js';
import { FencedSql } from './fenced-sql.js';
import type {
  FencedRow,
  FencedTableOptions,
  FencedWriteOptions,
  RowKey,
  SqlStatement,
} from './fenced-types.js';

/**
 * What the SQLite adapter needs of a `better-sqlite3` `Database`. Typed by
 * shape, so this package needs no types of better-sqlite3 and never loads it.
 */
export interface SqliteDatabase {
  prepare(source: string): { all(...params: unknown[]): unknown[] };
  /** better-sqlite3's: `update()` commits its claim and write as one transaction with it. */
  transaction?(fn: () => unknown): () => unknown;
}

/**
 * Fenced rows of an SQLite table through better-sqlite3, synchronous like
 * the driver: the calls compose inside `db.transaction(...)`, so a fenced
 * write and the rows that go with it commit together.
 *
 * ```ts
 * const products = sqliteFence<Product>(db, { table: 'products' });
 * const product = products.claim({ id: 7 }, lock.token!);
 * await charge(); // the lock's work; no transaction stays open meanwhile
 * products.write({ id: 7 }, lock.token!, { stock: product.stock - 1 });
 * ```
 *
 * Needs SQLite 3.35 or later (`RETURNING`); better-sqlite3 ships a newer one.
 */
export function sqliteFence<R extends FencedRow = FencedRow>(
  db: SqliteDatabase,
  options: FencedTableOptions,
): SqliteFencedTable<R> {
  return new SqliteFencedTable<R>(db, new FencedSql('sqlite', options));
}

/** The synchronous counterpart of {@link FencedTable}, for better-sqlite3. */
export class SqliteFencedTable<R extends FencedRow = FencedRow> {
  private checked = false;
  /** update()'s step, made on its first call (see `updateStep`). */
  private updating: (() => unknown) | undefined;
  /** The update the step is to run, set just before the step is called. */
  private nextUpdate: UpdateCall<R> | undefined;
  private readonly statements = new Map<string, { all(...params: unknown[]): unknown[] }>();

  constructor(
    private readonly db: SqliteDatabase,
    private readonly sql: FencedSql,
  ) {}

  /** Checks that the token column exists and holds integers; done before the first statement. */
  verify(): void {
    if (this.checked) return;
    this.sql.checkColumnType(this.run(this.sql.columnType()));
    this.checked = true;
  }

  /** Reads the row and claims it with `token` in one statement; see {@link FencedTable.claim}. */
  claim(key: RowKey, token: number): R {
    const statement = this.sql.claim(key, token);
    this.verify();
    const rows = this.run(statement);
    if (rows.length > 0) return this.sql.accepted(rows, key) as R;
    throw this.sql.refusal('claim', key, token, this.run(this.sql.inspect(key)), undefined);
  }

  /** Writes where the row still carries `token`; see {@link FencedTable.write}. */
  write(key: RowKey, token: number, values: Partial<R>, options?: FencedWriteOptions<R>): R {
    const expect = options?.expect as FencedRow | undefined;
    const statement = this.sql.write(key, token, values, expect);
    this.verify();
    const rows = this.run(statement);
    if (rows.length > 0) return this.sql.accepted(rows, key) as R;
    const found = this.run(this.sql.inspect(key, Object.keys(expect ?? {})));
    throw this.sql.refusal('write', key, token, found, expect);
  }

  /**
   * Claim, compute, write, synchronously; see {@link FencedTable.update}.
   * Both statements commit as one transaction (a savepoint inside the
   * caller's): one commit instead of two, and no other connection's write
   * between them. A `change` that throws leaves the claim committed, as a
   * claim on its own does (unless the caller's transaction rolls back).
   * `change` is synchronous, as the driver is: a Promise from it is refused.
   */
  update(key: RowKey, token: number, change: (row: R) => Partial<R>): R {
    this.updating ??= this.updateStep();
    this.nextUpdate = { key, token, change };
    const outcome = this.updating() as UpdateOutcome<R>;
    if ('error' in outcome) throw outcome.error;
    return outcome.row;
  }

  /**
   * Claim, compute and write, inside one transaction where the driver has
   * them: made once (better-sqlite3 builds four wrappers per `transaction()`
   * call). It takes no arguments, as the database's `transaction()` is only
   * known to call it with none: it reads its update from `nextUpdate` first
   * thing, so that an update made inside `change` (a nested transaction)
   * sets its own. A failed `change` comes back as a value, so that the
   * transaction commits the claim.
   */
  private updateStep(): () => unknown {
    const step = (): UpdateOutcome<R> => {
      const { key, token, change } = this.nextUpdate!;
      this.nextUpdate = undefined;
      const row = this.claim(key, token);
      let values: Partial<R>;
      try {
        values = computed(change, row);
      } catch (error) {
        return { error };
      }
      return { row: this.write(key, token, values) };
    };
    return typeof this.db.transaction === 'function' ? this.db.transaction(step) : step;
  }

  private run({ sql, params }: SqlStatement): FencedRow[] {
    let prepared = this.statements.get(sql);
    if (!prepared) {
      prepared = this.db.prepare(sql);
      // The statements differ only by the columns written: a handful per table.
      if (this.statements.size < 64) this.statements.set(sql, prepared);
    }
    return prepared.all(...params) as FencedRow[];
  }
}

/** What one update() asks of the step: its row, token and change. */
interface UpdateCall<R> {
  readonly key: RowKey;
  readonly token: number;
  readonly change: (row: R) => Partial<R>;
}

/** The step's outcome: the row written, or the error of a failed change (the claim commits). */
type UpdateOutcome<R> = { row: R } | { error: unknown };

/** A synchronous `change`'s values: a Promise would be written as no values at all. */
function computed<R extends FencedRow>(change: (row: R) => Partial<R>, row: R): Partial<R> {
  const values: unknown = change(row);
  if (typeof (values as { then?: unknown } | null)?.then === 'function') {
    // Refused, not awaited: its own failure, if any, must not surface as an unhandled rejection.
    (values as PromiseLike<unknown>).then(undefined, () => undefined);
    throw new LockOptionsError(
      "sqliteFence's update() is synchronous, as better-sqlite3 is: its change must return the values, not a Promise. " +
        'For async work, claim(), await the work, then write().',
    );
  }
  return values as Partial<R>;
}
