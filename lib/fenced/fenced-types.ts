// The fenced tables' public types, and the statement the SQL builders hand to a driver.

/** The SQL dialects the helpers speak: both have `UPDATE ... RETURNING`. */
export type SqlDialect = 'postgres' | 'sqlite';

/** A row as the driver returns it. */
export type FencedRow = Record<string, unknown>;

/** The columns that name one row and their values, e.g. `{ id: 7 }` or `{ shop: 1, sku: 'A-7' }`. */
export type RowKey = Readonly<Record<string, unknown>>;

export interface FencedTableOptions {
  /** The table, optionally with its schema (`shop.products`), as the database spells it. */
  readonly table: string;
  /**
   * The column that keeps the largest token that claimed or wrote each row.
   * It must hold integers up to 2^53: `BIGINT` (or `NUMERIC`) in PostgreSQL,
   * `INTEGER` in SQLite. Default: `last_token`.
   */
  readonly tokenColumn?: string;
}

export interface FencedWriteOptions<R extends FencedRow = FencedRow> {
  /**
   * Writes without a claim, on condition that the row still holds these
   * values (the ones the new values were computed from) and no newer token
   * has claimed it. Without `expect`, a write needs the row claimed with
   * its token by `claim()` first.
   */
  readonly expect?: Partial<R>;
}

/**
 * A table whose rows are written by lock holders, fenced by their tokens.
 *
 * A read-modify-write goes `claim()` (the read, which registers the token on
 * the row in the same statement), then `write()` (which changes the row only
 * where it still carries that token): a holder paused since its read cannot
 * write any more once a newer holder has read. `update()` does both.
 */
export interface FencedTable<R extends FencedRow = FencedRow> {
  /**
   * Reads the row and claims it with `token`, in one statement, unless a
   * newer token claimed it already ({@link FencedWriteRejectedError}).
   * Resolves with the row as it is now (its token column set to `token`).
   */
  claim(key: RowKey, token: number): Promise<R>;
  /**
   * Writes `values` where the row still carries `token` (or, with `expect`,
   * where no newer token claimed it and it holds the expected values) and
   * sets its token column to `token`. Resolves with the row as written.
   */
  write(
    key: RowKey,
    token: number,
    values: Partial<R>,
    options?: FencedWriteOptions<R>,
  ): Promise<R>;
  /**
   * Claim, compute, write: the read-modify-write in one call. `change` gets
   * the row as claimed and returns the columns to write. It may take its
   * time: no transaction stays open, the claim is what keeps older holders out.
   */
  update(
    key: RowKey,
    token: number,
    change: (row: R) => Partial<R> | Promise<Partial<R>>,
  ): Promise<R>;
  /** Checks that the token column exists and can hold every token; done before the first statement. */
  verify(): Promise<void>;
}

export interface SqlStatement {
  readonly sql: string;
  readonly params: unknown[];
}
