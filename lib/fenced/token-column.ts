import { FencedColumnError } from './fenced-errors.js';
import type { FencedRow, SqlDialect, SqlStatement } from './fenced-types.js';

/**
 * The token column's check, per dialect: the query for its declared type,
 * and whether that type keeps every token as an integer.
 */

/** Decimal digits every integer up to 2^53 fits in. */
const TOKEN_DIGITS = 16;

/** Where the token column is: its table (with the schema, if given) and its name. */
export interface TokenColumn {
  readonly dialect: SqlDialect;
  /** `products` or `shop.products`, as the caller wrote it, for messages. */
  readonly table: string;
  readonly schema: string | undefined;
  readonly tableName: string;
  readonly column: string;
}

/** The statement that reads the declared type of the token column. */
export function columnTypeQuery(at: TokenColumn): SqlStatement {
  if (at.dialect === 'postgres') {
    return {
      sql:
        'SELECT data_type, numeric_precision, numeric_scale FROM information_schema.columns ' +
        'WHERE table_schema = COALESCE($1::text, current_schema()) AND table_name = $2 AND column_name = $3',
      params: [at.schema ?? null, at.tableName, at.column],
    };
  }
  return {
    sql: 'SELECT type FROM pragma_table_info(?, ?) WHERE name = ?',
    params: [at.tableName, at.schema ?? 'main', at.column],
  };
}

/** Throws {@link FencedColumnError} unless the column found (`rows`) can hold every token. */
export function checkColumnType(at: TokenColumn, rows: readonly FencedRow[]): void {
  const { dialect, table, column } = at;
  const row = rows[0];
  const alter =
    dialect === 'postgres'
      ? `ALTER TABLE ${table} ALTER COLUMN ${column} TYPE bigint`
      : `a column ${column} INTEGER NOT NULL DEFAULT 0`;
  if (!row) {
    throw new FencedColumnError(
      table,
      column,
      undefined,
      dialect === 'postgres'
        ? `Add it: ALTER TABLE ${table} ADD COLUMN ${column} bigint NOT NULL DEFAULT 0 ` +
            '(or name the table with its schema, or the existing column with tokenColumn).'
        : `Add it: ALTER TABLE ${table} ADD COLUMN ${column} INTEGER NOT NULL DEFAULT 0 ` +
            '(or name the existing column with tokenColumn).',
    );
  }
  if (dialect === 'postgres') {
    const type = String(row.data_type);
    const precision = row.numeric_precision == null ? undefined : Number(row.numeric_precision);
    const scale = row.numeric_scale == null ? 0 : Number(row.numeric_scale);
    if (type === 'bigint') return;
    if (type === 'numeric' && (precision === undefined || precision - scale >= TOKEN_DIGITS))
      return;
    const shown = type === 'numeric' ? `numeric(${precision}, ${scale})` : type;
    throw new FencedColumnError(
      table,
      column,
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
    table,
    column,
    declared === '' ? 'declared without a type' : declared,
    `Tokens must be kept and compared as integers: declare ${alter} (SQLite's INTEGER holds 64 bits).`,
  );
}
