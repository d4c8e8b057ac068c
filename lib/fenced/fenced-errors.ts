import { LockError } from '../engine/lock-errors.js';

/**
 * A fenced statement changed nothing, and why: a newer holder claimed the
 * row, the row was never claimed with this token, it does not exist, or a
 * value the write depended on has changed. Nothing was written; the holder
 * must not retry with the same token.
 */
export class FencedWriteError extends LockError {
  override readonly code: string = 'FENCED_WRITE';

  constructor(
    /** What was written, e.g. `products (id = 7)` or `redis hash stock:7`. */
    readonly target: string,
    /** The token the refused statement carried. */
    readonly token: number,
    message: string,
  ) {
    super(message);
  }
}

/**
 * A newer lock holder claimed the row first: this holder's lock ran out
 * (its lease ended while it was paused, say) and a write from it now would
 * overwrite, or be overwritten by, work based on fresher data.
 */
export class FencedWriteRejectedError extends FencedWriteError {
  override readonly code = 'FENCED_WRITE_REJECTED';

  constructor(
    target: string,
    token: number,
    /** The token that claimed the row since: larger than `token`. */
    readonly newerToken: number,
    readonly action: 'claim' | 'write',
  ) {
    super(
      target,
      token,
      `Refused to ${action} ${target} with fencing token ${token}: a newer lock holder claimed it with token ${newerToken}. ` +
        'This holder lost its lock (its lease ran out); drop this work and do not retry with the same token: ' +
        'acquire the lock again and start over from a fresh claim.',
    );
  }
}

/**
 * The write came without a claim: the row carries an older token than the
 * write's, so what the holder read was not registered, and a holder paused
 * since its read could still write on top of it. Read through `claim()`.
 */
export class FencedRowNotClaimedError extends FencedWriteError {
  override readonly code = 'FENCED_ROW_NOT_CLAIMED';

  constructor(
    target: string,
    token: number,
    /** The token the row carries: smaller than `token`. */
    readonly rowToken: number,
  ) {
    super(
      target,
      token,
      `Refused to write ${target} with fencing token ${token}: the row carries token ${rowToken}, so it was never claimed with ${token}. ` +
        'Read the row with claim() (or use update()) under the same lock before writing it, ' +
        'or pass { expect } with the values the write depends on.',
    );
  }
}

/** No row (or Redis hash, for a write) has the given key. */
export class FencedRowMissingError extends FencedWriteError {
  override readonly code = 'FENCED_ROW_MISSING';

  constructor(target: string, token: number, tokenColumn: string) {
    super(
      target,
      token,
      `${target} does not exist, so fencing token ${token} could not claim or write it. ` +
        `Create the row first (with ${tokenColumn} = 0), or check the key.`,
    );
  }
}

/**
 * A write with `expect` found other values than the ones it was computed
 * from, while no newer token had claimed the row: something changed it
 * without the lock (or under this same token). Read again and recompute.
 */
export class FencedValueChangedError extends FencedWriteError {
  override readonly code = 'FENCED_VALUE_CHANGED';

  constructor(
    target: string,
    token: number,
    /** The values the write expected, by column. */
    readonly expected: Readonly<Record<string, unknown>>,
    /** What the row holds now, for the same columns. */
    readonly actual: Readonly<Record<string, unknown>>,
  ) {
    super(
      target,
      token,
      `Refused to write ${target} with fencing token ${token}: it expected ${describe(expected)} but the row holds ${describe(actual)}. ` +
        'Read the row again (claim() it) and compute the write from what it holds now.',
    );
  }
}

/**
 * The column (or Redis field) that keeps the tokens cannot hold them:
 * tokens are JavaScript integers up to 2^53 and must compare as numbers.
 */
export class FencedColumnError extends LockError {
  override readonly code = 'FENCED_COLUMN_UNSUITABLE';

  constructor(
    readonly table: string,
    readonly column: string,
    /** The declared type found, or undefined when the column does not exist. */
    readonly type: string | undefined,
    advice: string,
  ) {
    super(
      type === undefined
        ? `Cannot fence writes to ${table}: it has no column ${column}. ${advice}`
        : `Cannot fence writes to ${table}: its token column ${column} is ${type}. ${advice}`,
    );
  }
}

function describe(values: Readonly<Record<string, unknown>>): string {
  return Object.entries(values)
    .map(
      ([column, value]) =>
        `${column} = ${typeof value === 'string' ? JSON.stringify(value) : String(value)}`,
    )
    .join(', ');
}
