import { LockOptionsError } from '../engine/lock-errors.js';
import {
  FencedColumnError,
  FencedRowMissingError,
  FencedRowNotClaimedError,
  FencedValueChangedError,
  FencedWriteRejectedError,
  type FencedWriteError,
} from './fenced-errors.js';

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

// Plain names only: they go into the SQL text, quoted, so nothing else may pass.
const NAME = /^[A-Za-z_][A-Za-z0-9_$]*$/;
const TOKEN_ALIAS = '__fence_token';
/** Decimal digits every integer up to 2^53 fits in. */
const TOKEN_DIGITS = 16;

/**
 * The statements of the safe pattern for one table, and what their results
 * mean. The adapters only run them (sync or async, through their driver).
 */
export class FencedSql {
  /** `products` or `shop.products`, for messages. */
  readonly table: string;
  readonly tokenColumn: string;
  private readonly schema: string | undefined;
  private readonly tableName: string;
  private readonly quotedTable: string;
  private readonly quotedToken: string;

  constructor(
    readonly dialect: SqlDialect,
    options: FencedTableOptions,
  ) {
    if (dialect !== 'postgres' && dialect !== 'sqlite') {
      throw new LockOptionsError(
        `Fenced tables speak 'postgres' or 'sqlite', not '${String(dialect)}'. ` +
          'For another database, run the statements shown in docs/fencing.md (in the repository) yourself.',
      );
    }
    const parts = typeof options?.table === 'string' ? options.table.split('.') : [];
    if (parts.length < 1 || parts.length > 2 || !parts.every((part) => NAME.test(part))) {
      throw new LockOptionsError(
        `table must be a plain SQL name, optionally with its schema ('products', 'shop.products'); got ${JSON.stringify(options?.table)}.`,
      );
    }
    this.table = options.table;
    [this.schema, this.tableName] =
      parts.length === 2 ? [parts[0], parts[1]!] : [undefined, parts[0]!];
    this.quotedTable = parts.map(quote).join('.');
    this.tokenColumn = checkedName(options.tokenColumn ?? 'last_token', 'tokenColumn');
    this.quotedToken = quote(this.tokenColumn);
  }

  /** `UPDATE ... SET token = :token WHERE <key> AND token <= :token RETURNING *`. */
  claim(key: RowKey, token: number): SqlStatement {
    checkToken(token);
    const q = this.params();
    // `<=`: the holder's own earlier claim stands; only a newer token refuses. COALESCE: a
    // nullable column's NULL means "never claimed", not "refuse forever".
    const sql =
      `UPDATE ${this.quotedTable} SET ${this.quotedToken} = ${q.add(token)} ` +
      `WHERE ${this.keyCondition(key, q)} AND COALESCE(${this.quotedToken}, 0) <= ${q.add(token)} RETURNING *`;
    return { sql, params: q.values };
  }

  /**
   * Without `expect`: `... WHERE <key> AND token = :token` (the row must carry
   * this holder's claim). With it: `... AND token <= :token AND col IS :expected ...`.
   */
  write(
    key: RowKey,
    token: number,
    values: FencedRow,
    expect: FencedRow | undefined,
  ): SqlStatement {
    checkToken(token);
    if (values === null || typeof values !== 'object') {
      throw new LockOptionsError(
        'The values to write must be an object of column names and values.',
      );
    }
    const q = this.params();
    const assignments = Object.entries(values)
      .filter(([, value]) => value !== undefined)
      .map(([column, value]) => {
        const name = checkedName(column, 'a column to write');
        if (name === this.tokenColumn) {
          throw new LockOptionsError(
            `Do not write the token column ${name} yourself: the fenced write sets it to the token.`,
          );
        }
        return `${quote(name)} = ${q.add(value)}`;
      });
    assignments.push(`${this.quotedToken} = ${q.add(token)}`);
    let condition = this.keyCondition(key, q);
    if (expect === undefined) {
      condition += ` AND ${this.quotedToken} = ${q.add(token)}`;
    } else {
      const expected = Object.entries(expect).filter(([, value]) => value !== undefined);
      if (expected.length === 0) {
        throw new LockOptionsError(
          'expect names no column: give the values the write was computed from, or claim() the row and write without expect.',
        );
      }
      condition += ` AND COALESCE(${this.quotedToken}, 0) <= ${q.add(token)}`;
      for (const [column, value] of expected) {
        const same = this.dialect === 'postgres' ? 'IS NOT DISTINCT FROM' : 'IS';
        condition += ` AND ${quote(checkedName(column, 'an expected column'))} ${same} ${q.add(value)}`;
      }
    }
    const sql = `UPDATE ${this.quotedTable} SET ${assignments.join(', ')} WHERE ${condition} RETURNING *`;
    return { sql, params: q.values };
  }

  /** Reads back what refused a statement: the row's token and the expected columns. */
  inspect(key: RowKey, columns: readonly string[] = []): SqlStatement {
    const q = this.params();
    const selected = [
      `${this.quotedToken} AS ${quote(TOKEN_ALIAS)}`,
      ...columns.map((column) => quote(checkedName(column, 'an expected column'))),
    ];
    const sql = `SELECT ${selected.join(', ')} FROM ${this.quotedTable} WHERE ${this.keyCondition(key, q)}`;
    return { sql, params: q.values };
  }

  /** The declared type of the token column. */
  columnType(): SqlStatement {
    if (this.dialect === 'postgres') {
      return {
        sql:
          'SELECT data_type, numeric_precision, numeric_scale FROM information_schema.columns ' +
          'WHERE table_schema = COALESCE($1::text, current_schema()) AND table_name = $2 AND column_name = $3',
        params: [this.schema ?? null, this.tableName, this.tokenColumn],
      };
    }
    return {
      sql: 'SELECT type FROM pragma_table_info(?, ?) WHERE name = ?',
      params: [this.tableName, this.schema ?? 'main', this.tokenColumn],
    };
  }

  /** Throws {@link FencedColumnError} unless the column found can hold every token. */
  checkColumnType(rows: readonly FencedRow[]): void {
    const row = rows[0];
    const alter =
      this.dialect === 'postgres'
        ? `ALTER TABLE ${this.table} ALTER COLUMN ${this.tokenColumn} TYPE bigint`
        : `a column ${this.tokenColumn} INTEGER NOT NULL DEFAULT 0`;
    if (!row) {
      throw new FencedColumnError(
        this.table,
        this.tokenColumn,
        undefined,
        this.dialect === 'postgres'
          ? `Add it: ALTER TABLE ${this.table} ADD COLUMN ${this.tokenColumn} bigint NOT NULL DEFAULT 0 ` +
              '(or name the table with its schema, or the existing column with tokenColumn).'
          : `Add it: ALTER TABLE ${this.table} ADD COLUMN ${this.tokenColumn} INTEGER NOT NULL DEFAULT 0 ` +
              '(or name the existing column with tokenColumn).',
      );
    }
    if (this.dialect === 'postgres') {
      const type = String(row.data_type);
      const precision = row.numeric_precision == null ? undefined : Number(row.numeric_precision);
      const scale = row.numeric_scale == null ? 0 : Number(row.numeric_scale);
      if (type === 'bigint') return;
      if (type === 'numeric' && (precision === undefined || precision - scale >= TOKEN_DIGITS))
        return;
      const shown = type === 'numeric' ? `numeric(${precision}, ${scale})` : type;
      throw new FencedColumnError(
        this.table,
        this.tokenColumn,
        shown,
        `Tokens are integers up to 2^53 and need bigint (integer stops at 2^31 - 1; text and floating types do not compare them as integers): ${alter}.`,
      );
    }
    // SQLite decides by type affinity: INTEGER (any declared type containing INT) and NUMERIC keep
    // integers as 64-bit integers; TEXT would compare '10' below '9', and no type at all lets text in.
    const declared = String(row.type ?? '');
    const upper = declared.toUpperCase();
    const textual = /CHAR|CLOB|TEXT/.test(upper);
    const integer = upper.includes('INT');
    const none = upper === '' || upper.includes('BLOB');
    const real = /REAL|FLOA|DOUB/.test(upper);
    if (integer || (!textual && !none && !real)) return;
    throw new FencedColumnError(
      this.table,
      this.tokenColumn,
      declared === '' ? 'declared without a type' : declared,
      `Tokens must be kept and compared as integers: declare ${alter} (SQLite's INTEGER holds 64 bits).`,
    );
  }

  /** The row a claim or write returned; more than one means the key does not name one row. */
  accepted(rows: readonly FencedRow[], key: RowKey): FencedRow {
    if (rows.length > 1) {
      throw new LockOptionsError(
        `${this.describe(key)} matched ${rows.length} rows, which were all claimed or written: ` +
          'the key must name one row (give its primary key).',
      );
    }
    return rows[0]!;
  }

  /** Why a claim or write changed nothing, from what `inspect()` read back. */
  refusal(
    action: 'claim' | 'write',
    key: RowKey,
    token: number,
    found: readonly FencedRow[],
    expect: FencedRow | undefined,
  ): FencedWriteError {
    const target = this.describe(key);
    const row = found[0];
    if (!row) return new FencedRowMissingError(target, token, this.tokenColumn);
    const rowToken = toToken(row[TOKEN_ALIAS]);
    if (rowToken > token) return new FencedWriteRejectedError(target, token, rowToken, action);
    if (expect === undefined) return new FencedRowNotClaimedError(target, token, rowToken);
    const expected: FencedRow = {};
    const actual: FencedRow = {};
    for (const [column, value] of Object.entries(expect)) {
      if (value === undefined) continue;
      expected[column] = value;
      actual[column] = row[column];
    }
    return new FencedValueChangedError(target, token, expected, actual);
  }

  /** `products (id = 7)`. */
  describe(key: RowKey): string {
    const parts = Object.entries(key ?? {}).map(
      ([column, value]) =>
        `${column} = ${typeof value === 'string' ? JSON.stringify(value) : String(value)}`,
    );
    return `${this.table} (${parts.join(', ')})`;
  }

  private keyCondition(key: RowKey, q: Params): string {
    const entries = key !== null && typeof key === 'object' ? Object.entries(key) : [];
    if (entries.length === 0) {
      throw new LockOptionsError(
        `The key must name the row by its columns, e.g. { id: 7 }; got ${JSON.stringify(key)}.`,
      );
    }
    return entries
      .map(([column, value]) => {
        if (value === undefined || value === null) {
          throw new LockOptionsError(
            `The key column ${column} of ${this.table} is ${String(value)}: a fenced row is named by values.`,
          );
        }
        return `${quote(checkedName(column, 'a key column'))} = ${q.add(value)}`;
      })
      .join(' AND ');
  }

  private params(): Params {
    const values: unknown[] = [];
    const postgres = this.dialect === 'postgres';
    return {
      values,
      add(value: unknown): string {
        values.push(typeof value === 'boolean' && !postgres ? Number(value) : value);
        return postgres ? `$${values.length}` : '?';
      },
    };
  }
}

interface Params {
  readonly values: unknown[];
  add(value: unknown): string;
}

function quote(name: string): string {
  return `"${name}"`;
}

function checkedName(name: string, what: string): string {
  if (typeof name !== 'string' || !NAME.test(name)) {
    throw new LockOptionsError(
      `${what} must be a plain SQL name (letters, digits, _); got ${JSON.stringify(name)}.`,
    );
  }
  return name;
}

/** A fencing token as the caller passes it: what `lock.token` holds. */
export function checkToken(token: number): void {
  if (!Number.isSafeInteger(token) || token <= 0) {
    throw new LockOptionsError(
      `A fencing token is a positive integer below 2^53 (lock.token, @FencingToken()); got ${String(token)}. ` +
        'A lock has no token when the engine runs with fencing: false.',
    );
  }
}

/** A token column's value as drivers return it: number, bigint or (PostgreSQL bigint) string. */
export function toToken(value: unknown): number {
  if (value === null || value === undefined) return 0;
  return Number(value);
}

/**
 * The async flow every driver shares: the statement, and when it changed
 * nothing, a read-back that says why. The column check runs once, before the
 * first statement; a failed check (a connection error, say) runs again next time.
 */
export class AsyncFencedTable<R extends FencedRow> implements FencedTable<R> {
  private checked: Promise<void> | undefined;

  constructor(
    private readonly sql: FencedSql,
    private readonly run: (statement: SqlStatement) => Promise<FencedRow[]>,
  ) {}

  verify(): Promise<void> {
    this.checked ??= this.run(this.sql.columnType()).then(
      (rows) => this.sql.checkColumnType(rows),
      (error: unknown) => {
        this.checked = undefined;
        throw error;
      },
    );
    return this.checked;
  }

  async claim(key: RowKey, token: number): Promise<R> {
    const statement = this.sql.claim(key, token);
    await this.verify();
    const rows = await this.run(statement);
    if (rows.length > 0) return this.sql.accepted(rows, key) as R;
    throw this.sql.refusal('claim', key, token, await this.run(this.sql.inspect(key)), undefined);
  }

  async write(
    key: RowKey,
    token: number,
    values: Partial<R>,
    options?: FencedWriteOptions<R>,
  ): Promise<R> {
    const expect = options?.expect as FencedRow | undefined;
    const statement = this.sql.write(key, token, values, expect);
    await this.verify();
    const rows = await this.run(statement);
    if (rows.length > 0) return this.sql.accepted(rows, key) as R;
    const found = await this.run(this.sql.inspect(key, Object.keys(expect ?? {})));
    throw this.sql.refusal('write', key, token, found, expect);
  }

  async update(
    key: RowKey,
    token: number,
    change: (row: R) => Partial<R> | Promise<Partial<R>>,
  ): Promise<R> {
    const row = await this.claim(key, token);
    return this.write(key, token, await change(row));
  }
}
