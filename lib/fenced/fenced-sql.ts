import { LockOptionsError } from '../engine/lock-errors.js';
import {
  checkDialect,
  checkedName,
  checkTableName,
  checkToken,
  quote,
  toToken,
} from './fenced-checks.js';
import {
  FencedRowMissingError,
  FencedRowNotClaimedError,
  FencedValueChangedError,
  FencedWriteRejectedError,
  type FencedWriteError,
} from './fenced-errors.js';
import type {
  FencedRow,
  FencedTableOptions,
  RowKey,
  SqlDialect,
  SqlStatement,
} from './fenced-types.js';
import { checkColumnType, columnTypeQuery, type TokenColumn } from './token-column.js';

const TOKEN_ALIAS = '__fence_token';

/** The most statement texts a table keeps (see FencedSql's `cached`). */
const MAX_SHAPES = 64;

/**
 * The statements of the safe pattern for one table, and what their results
 * mean. The adapters only run them (sync or async, through their driver).
 */
export class FencedSql {
  /** `products` or `shop.products`, for messages. */
  readonly table: string;
  readonly tokenColumn: string;
  private readonly column: TokenColumn;
  private readonly quotedTable: string;
  private readonly quotedToken: string;
  /** Statement texts by shape (see `cached`). */
  private readonly statements = new Map<string, string>();

  constructor(
    readonly dialect: SqlDialect,
    options: FencedTableOptions,
  ) {
    checkDialect(dialect);
    const name = checkTableName(options?.table);
    this.table = options.table;
    this.quotedTable = name.quoted;
    this.tokenColumn = checkedName(options.tokenColumn ?? 'last_token', 'tokenColumn');
    this.quotedToken = quote(this.tokenColumn);
    this.column = {
      dialect,
      table: this.table,
      schema: name.schema,
      tableName: name.name,
      column: this.tokenColumn,
    };
  }

  /** `UPDATE ... SET token = :token WHERE <key> AND token <= :token RETURNING *`. */
  claim(key: RowKey, token: number): SqlStatement {
    checkToken(token);
    const keys = this.keyEntries(key);
    const sql = this.cached(`c${names(keys)}`, () => {
      const q = this.placeholders();
      // `<=`: the holder's own earlier claim stands; only a newer token refuses. COALESCE: a
      // nullable column's NULL means "never claimed", not "refuse forever".
      return (
        `UPDATE ${this.quotedTable} SET ${this.quotedToken} = ${q()} ` +
        `WHERE ${this.keyCondition(keys, q)} AND COALESCE(${this.quotedToken}, 0) <= ${q()} RETURNING *`
      );
    });
    const params: unknown[] = [token];
    for (const [, value] of keys) params.push(this.param(value));
    params.push(token);
    return { sql, params };
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
    const written = Object.entries(values).filter(([, value]) => value !== undefined);
    for (const [column] of written) {
      if (checkedName(column, 'a column to write') === this.tokenColumn) {
        throw new LockOptionsError(
          `Do not write the token column ${column} yourself: the fenced write sets it to the token.`,
        );
      }
    }
    const keys = this.keyEntries(key);
    let expected: [string, unknown][] | undefined;
    if (expect !== undefined) {
      expected = Object.entries(expect).filter(([, value]) => value !== undefined);
      if (expected.length === 0) {
        throw new LockOptionsError(
          'expect names no column: give the values the write was computed from, or claim() the row and write without expect.',
        );
      }
      for (const [column] of expected) checkedName(column, 'an expected column');
    }
    const shape = `w${names(written)}|${names(keys)}|${expected ? names(expected) : '-'}`;
    const sql = this.cached(shape, () => {
      const q = this.placeholders();
      const assignments = written.map(([column]) => `${quote(column)} = ${q()}`);
      assignments.push(`${this.quotedToken} = ${q()}`);
      let condition = this.keyCondition(keys, q);
      if (!expected) {
        condition += ` AND ${this.quotedToken} = ${q()}`;
      } else {
        condition += ` AND COALESCE(${this.quotedToken}, 0) <= ${q()}`;
        const same = this.dialect === 'postgres' ? 'IS NOT DISTINCT FROM' : 'IS';
        for (const [column] of expected) condition += ` AND ${quote(column)} ${same} ${q()}`;
      }
      return `UPDATE ${this.quotedTable} SET ${assignments.join(', ')} WHERE ${condition} RETURNING *`;
    });
    const params: unknown[] = [];
    for (const [, value] of written) params.push(this.param(value));
    params.push(token);
    for (const [, value] of keys) params.push(this.param(value));
    params.push(token);
    if (expected) for (const [, value] of expected) params.push(this.param(value));
    return { sql, params };
  }

  /** Reads back what refused a statement: the row's token and the expected columns. */
  inspect(key: RowKey, columns: readonly string[] = []): SqlStatement {
    const keys = this.keyEntries(key);
    const q = this.placeholders();
    const selected = [
      `${this.quotedToken} AS ${quote(TOKEN_ALIAS)}`,
      ...columns.map((column) => quote(checkedName(column, 'an expected column'))),
    ];
    const sql = `SELECT ${selected.join(', ')} FROM ${this.quotedTable} WHERE ${this.keyCondition(keys, q)}`;
    return { sql, params: keys.map(([, value]) => this.param(value)) };
  }

  /** The declared type of the token column. */
  columnType(): SqlStatement {
    return columnTypeQuery(this.column);
  }

  /** Throws {@link FencedColumnError} unless the column found can hold every token. */
  checkColumnType(rows: readonly FencedRow[]): void {
    checkColumnType(this.column, rows);
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

  /** The key's columns (checked) and values: a fenced row is named by values, not NULL. */
  private keyEntries(key: RowKey): [string, unknown][] {
    const entries = key !== null && typeof key === 'object' ? Object.entries(key) : [];
    if (entries.length === 0) {
      throw new LockOptionsError(
        `The key must name the row by its columns, e.g. { id: 7 }; got ${JSON.stringify(key)}.`,
      );
    }
    for (const [column, value] of entries) {
      checkedName(column, 'a key column');
      if (value === undefined || value === null) {
        throw new LockOptionsError(
          `The key column ${column} of ${this.table} is ${String(value)}: a fenced row is named by values.`,
        );
      }
    }
    return entries;
  }

  private keyCondition(keys: readonly [string, unknown][], q: () => string): string {
    return keys.map(([column]) => `${quote(column)} = ${q()}`).join(' AND ');
  }

  /**
   * A statement's text, built once per shape (the columns it names, checked
   * before they get here): a fenced write then costs its driver call and
   * little else. Bounded, as the shapes of one table are a handful.
   */
  private cached(shape: string, build: () => string): string {
    let sql = this.statements.get(shape);
    if (sql === undefined) {
      sql = build();
      if (this.statements.size < MAX_SHAPES) this.statements.set(shape, sql);
    }
    return sql;
  }

  /** The dialect's placeholders, numbered in the order they are asked for. */
  private placeholders(): () => string {
    let count = 0;
    return this.dialect === 'postgres' ? () => `$${++count}` : () => '?';
  }

  /** A value as the driver takes it: SQLite has no booleans. */
  private param(value: unknown): unknown {
    return typeof value === 'boolean' && this.dialect !== 'postgres' ? Number(value) : value;
  }
}

/** The columns of a statement's part, as its cache key: names hold no comma. */
function names(entries: readonly [string, unknown][]): string {
  let out = '';
  for (const [column] of entries) out += `${column},`;
  return out;
}
