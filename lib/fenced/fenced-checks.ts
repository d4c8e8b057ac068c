import { LockOptionsError } from '../engine/lock-errors.js';
import type { SqlDialect } from './fenced-types.js';

/**
 * What the fenced helpers check of their caller's input: the dialect, the
 * table and column names (which go into the SQL text) and the tokens.
 */

// Plain names only: they go into the SQL text, quoted, so nothing else may pass.
const NAME = /^[A-Za-z_][A-Za-z0-9_$]*$/;

/** A table named by the caller, checked: its schema (if given), its name, and both quoted. */
export interface TableName {
  readonly schema: string | undefined;
  readonly name: string;
  readonly quoted: string;
}

export function checkDialect(dialect: SqlDialect): void {
  if (dialect !== 'postgres' && dialect !== 'sqlite') {
    throw new LockOptionsError(
      `Fenced tables speak 'postgres' or 'sqlite', not '${String(dialect)}'. ` +
        'For another database, run the statements shown in docs/fencing.md (in the repository) yourself.',
    );
  }
}

/** `products` or `shop.products`, each part a plain name. */
export function checkTableName(table: unknown): TableName {
  const parts = typeof table === 'string' ? table.split('.') : [];
  if (parts.length < 1 || parts.length > 2 || !parts.every((part) => NAME.test(part))) {
    throw new LockOptionsError(
      `table must be a plain SQL name, optionally with its schema ('products', 'shop.products'); got ${JSON.stringify(table)}.`,
    );
  }
  const [schema, name] = parts.length === 2 ? [parts[0], parts[1]!] : [undefined, parts[0]!];
  return { schema, name, quoted: parts.map(quote).join('.') };
}

/** A column name, checked; `what` says which in the message. */
export function checkedName(name: string, what: string): string {
  if (typeof name !== 'string' || !NAME.test(name)) {
    throw new LockOptionsError(
      `${what} must be a plain SQL name (letters, digits, _); got ${JSON.stringify(name)}.`,
    );
  }
  return name;
}

/** A checked name as the SQL text spells it. */
export function quote(name: string): string {
  return `"${name}"`;
}

/** A fencing token as the caller passes it: what `lock.token` holds. */
export function checkToken(token: number): void {
  if (!Number.isSafeInteger(token) || token <= 0) {
    throw new LockOptionsError(
      `A fencing token is a positive integer below 2^53 (lock.token, @FencingToken()); got ${String(token)}. ` +
        (token === undefined
          ? 'An undefined token comes from a lock taken with fencing: false, or from LockContext.token read outside a locked call (no lock held there).'
          : 'A lock has no token when the engine runs with fencing: false.'),
    );
  }
}

/** A token column's value as drivers return it: number, bigint or (PostgreSQL bigint) string. */
export function toToken(value: unknown): number {
  if (value === null || value === undefined) return 0;
  return Number(value);
}
