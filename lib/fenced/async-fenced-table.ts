import type { FencedSql } from './fenced-sql.js';
import type {
  FencedRow,
  FencedTable,
  FencedWriteOptions,
  RowKey,
  SqlStatement,
} from './fenced-types.js';

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
