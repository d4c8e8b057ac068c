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
