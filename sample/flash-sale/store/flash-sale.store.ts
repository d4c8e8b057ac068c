import Database from 'better-sqlite3';
import { FencedWriteError, sqliteFence, type SqliteFencedTable } from 'nestjs-redis-lock/fenced';

export interface Product {
  readonly id: number;
  readonly name: string;
  readonly stock: number;
  /** The highest fencing token a write to this row carried. */
  readonly lastToken: number;
}

export type OrderStatus = 'pending' | 'paid';

export interface Order {
  readonly id: number;
  readonly productId: number;
  readonly status: OrderStatus;
  readonly paidBy: string | null;
  readonly paymentRef: string | null;
  readonly lastToken: number;
}

/**
 * How a sale under the lock writes the stock: `claimed` (the safe pattern: the
 * read claims the row with the token, the write needs the claim to stand) or
 * `write-only` (`... WHERE last_token < :token` at the write only, which a
 * holder paused after its read gets through). The demo runs both.
 */
export type StockWrites = 'claimed' | 'write-only';

/** What a fenced read or write did: done, or refused because a newer lock holder claimed the row. */
export type FencedWrite<T> =
  | { readonly written: true; readonly value: T }
  | { readonly written: false; readonly token: number; readonly lastToken: number };

/** What the demo (or an operator) reads back to check a sale. */
export interface SaleAudit {
  readonly stock: number;
  /** Paid orders of the product. */
  readonly sold: number;
  /** Writes refused by their fencing token. */
  readonly rejectedWrites: number;
}

const SCHEMA = `
  CREATE TABLE IF NOT EXISTS products (
    id         INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    stock      INTEGER NOT NULL,
    last_token INTEGER NOT NULL DEFAULT 0
  );
  CREATE TABLE IF NOT EXISTS orders (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    product_id  INTEGER NOT NULL REFERENCES products (id),
    status      TEXT    NOT NULL CHECK (status IN ('pending', 'paid')),
    paid_by     TEXT,
    payment_ref TEXT,
    last_token  INTEGER NOT NULL DEFAULT 0
  );
  CREATE INDEX IF NOT EXISTS orders_by_product ON orders (product_id, status);
  -- Every write refused by its fencing token is kept: a refused write is an event, not a no-op.
  CREATE TABLE IF NOT EXISTS rejected_writes (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    target     TEXT    NOT NULL,
    token      INTEGER NOT NULL,
    last_token INTEGER NOT NULL,
    instance   TEXT    NOT NULL,
    at         TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
  );
`;

interface ProductRow {
  id: number;
  name: string;
  stock: number;
  last_token: number;
}

interface OrderRow {
  id: number;
  product_id: number;
  status: OrderStatus;
  paid_by: string | null;
  payment_ref: string | null;
  last_token: number;
}

/**
 * The shop's data in one SQLite file that every instance opens (WAL mode, so
 * readers never wait for the writer; busy_timeout, so a writer waits for
 * another instance's write instead of failing).
 *
 * A read-modify-write under a lock (read the stock, charge, write the stock
 * minus one) goes through nestjs-redis-lock/fenced: the read claims the row
 * with the lock's fencing token (`UPDATE ... SET last_token = :token WHERE
 * id = :id AND last_token <= :token RETURNING *`) and the write changes it
 * only where the row still carries that token. A holder paused after its read
 * cannot write once the next holder has read. Fencing the write alone
 * (`WHERE last_token < :token`) would let it, and one sale would be lost.
 */
export class FlashSaleStore {
  private readonly statements: ReturnType<typeof prepareStatements>;
  private readonly products: SqliteFencedTable<ProductRow & Record<string, unknown>>;
  private readonly orders: SqliteFencedTable<OrderRow & Record<string, unknown>>;

  private constructor(private readonly db: Database.Database) {
    this.statements = prepareStatements(db);
    this.products = sqliteFence(db, { table: 'products' });
    this.orders = sqliteFence(db, { table: 'orders' });
  }

  /** Opens (and creates) the shared file; safe to call from several processes at once. */
  static open(file: string, busyTimeoutMs = 5000): FlashSaleStore {
    const db = new Database(file);
    // busy_timeout first: the other pragmas and the schema may have to wait for another instance.
    db.pragma(`busy_timeout = ${busyTimeoutMs}`);
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = NORMAL');
    db.pragma('foreign_keys = ON');
    db.exec(SCHEMA);
    return new FlashSaleStore(db);
  }

  product(id: number): Product | undefined {
    const row = this.statements.product.get(id);
    return row && toProduct(row);
  }

  /**
   * The read of a read-modify-write under the product's lock: the product as
   * it is now, its row claimed with `token` in the same statement. Refused
   * (and recorded) when a newer lock holder has claimed it already.
   */
  claimProduct(id: number, token: number, instance: string): FencedWrite<Product> {
    try {
      const row = this.products.claim({ id }, token);
      return { written: true, value: toProduct(row) };
    } catch (error) {
      if (error instanceof FencedWriteError) return this.rejected('products', id, token, instance);
      throw error;
    }
  }

  /**
   * Records a sale: the product's new stock and a paid order, in one
   * transaction. With a fencing token the stock write is fenced, `claimed`
   * (after claimProduct) or `write-only`, and nothing is written when a newer
   * holder claimed the row; without one (no lock) it is a plain write.
   */
  recordSale(sale: {
    productId: number;
    stock: number;
    paymentRef: string;
    instance: string;
    token: number | undefined;
    writes?: StockWrites;
  }): FencedWrite<Order> {
    return this.db
      .transaction((): FencedWrite<Order> => {
        const { productId, stock, paymentRef, instance, token, writes = 'claimed' } = sale;
        if (token === undefined) {
          this.statements.setStock.run({ id: productId, stock });
        } else if (writes === 'write-only') {
          if (this.statements.setStockWriteOnly.run({ id: productId, stock, token }).changes === 0)
            return this.rejected('products', productId, token, instance);
        } else {
          try {
            this.products.write({ id: productId }, token, { stock });
          } catch (error) {
            if (error instanceof FencedWriteError)
              return this.rejected('products', productId, token, instance);
            throw error;
          }
        }
        const { lastInsertRowid } = this.statements.insertOrder.run({
          productId,
          status: 'paid',
          paidBy: instance,
          paymentRef,
          token: token ?? 0,
        });
        return { written: true, value: this.order(Number(lastInsertRowid))! };
      })
      .immediate();
  }

  createOrder(productId: number): Order {
    const { lastInsertRowid } = this.statements.insertOrder.run({
      productId,
      status: 'pending',
      paidBy: null,
      paymentRef: null,
      token: 0,
    });
    return this.order(Number(lastInsertRowid))!;
  }

  order(id: number): Order | undefined {
    const row = this.statements.order.get(id);
    return row && toOrder(row);
  }

  /** The order, its row claimed with `token` (the read before paying it); refused and recorded when a newer holder claimed it. */
  claimOrder(id: number, token: number, instance: string): FencedWrite<Order> | undefined {
    if (!this.order(id)) return undefined;
    try {
      return { written: true, value: toOrder(this.orders.claim({ id }, token)) };
    } catch (error) {
      if (error instanceof FencedWriteError) return this.rejected('orders', id, token, instance);
      throw error;
    }
  }

  /** Marks a claimed order paid: refused when a newer lock holder claimed the order since. */
  payOrder(payment: {
    orderId: number;
    paymentRef: string;
    instance: string;
    token: number;
  }): FencedWrite<Order> {
    const { orderId, paymentRef, instance, token } = payment;
    try {
      const row = this.orders.write({ id: orderId }, token, {
        status: 'paid',
        paid_by: instance,
        payment_ref: paymentRef,
      });
      return { written: true, value: toOrder(row) };
    } catch (error) {
      if (error instanceof FencedWriteError)
        return this.rejected('orders', orderId, token, instance);
      throw error;
    }
  }

  /** Puts a product on sale with `stock` units, forgetting its earlier orders (demo runs start clean). */
  restock(id: number, name: string, stock: number): void {
    this.db
      .transaction(() => {
        this.db
          .prepare(
            `INSERT INTO products (id, name, stock) VALUES (?, ?, ?)
             ON CONFLICT (id) DO UPDATE SET name = excluded.name, stock = excluded.stock, last_token = 0`,
          )
          .run(id, name, stock);
        this.db.prepare('DELETE FROM orders WHERE product_id = ?').run(id);
        this.db.prepare('DELETE FROM rejected_writes WHERE target = ?').run(`product:${id}`);
      })
      .immediate();
  }

  /** Adds a product unless one with this id exists (the first start of a fresh file). */
  seed(id: number, name: string, stock: number): void {
    this.db
      .prepare(
        'INSERT INTO products (id, name, stock) VALUES (?, ?, ?) ON CONFLICT (id) DO NOTHING',
      )
      .run(id, name, stock);
  }

  audit(productId: number): SaleAudit {
    const stock = this.product(productId)?.stock ?? 0;
    const sold = this.db
      .prepare<[number], { n: number }>(
        "SELECT COUNT(*) AS n FROM orders WHERE product_id = ? AND status = 'paid'",
      )
      .get(productId)!.n;
    const rejectedWrites = this.rejectedWrites(`product:${productId}`);
    return { stock, sold, rejectedWrites };
  }

  /** How many writes to `target` (e.g. `order:7`) their fencing token refused. */
  rejectedWrites(target: string): number {
    return this.db
      .prepare<[string], { n: number }>(
        'SELECT COUNT(*) AS n FROM rejected_writes WHERE target = ?',
      )
      .get(target)!.n;
  }

  close(): void {
    if (this.db.open) this.db.close();
  }

  /** Keeps the refused write, and says which token it lost to. */
  private rejected(
    table: 'products' | 'orders',
    id: number,
    token: number,
    instance: string,
  ): { written: false; token: number; lastToken: number } {
    const lastToken = this.db
      .prepare<[number], { last_token: number }>(`SELECT last_token FROM ${table} WHERE id = ?`)
      .get(id)!.last_token;
    const target = `${table === 'products' ? 'product' : 'order'}:${id}`;
    this.statements.reject.run({ target, token, lastToken, instance });
    return { written: false, token, lastToken };
  }
}

function prepareStatements(db: Database.Database) {
  return {
    product: db.prepare<[number], ProductRow>(
      'SELECT id, name, stock, last_token FROM products WHERE id = ?',
    ),
    setStock: db.prepare<{ id: number; stock: number }>(
      'UPDATE products SET stock = :stock WHERE id = :id',
    ),
    // Fenced at the write only: what the demo measures against the claimed write. A holder paused
    // after its read gets through it while the next holder is between its read and its write.
    setStockWriteOnly: db.prepare<{ id: number; stock: number; token: number }>(
      'UPDATE products SET stock = :stock, last_token = :token WHERE id = :id AND last_token < :token',
    ),
    insertOrder: db.prepare<{
      productId: number;
      status: OrderStatus;
      paidBy: string | null;
      paymentRef: string | null;
      token: number;
    }>(
      `INSERT INTO orders (product_id, status, paid_by, payment_ref, last_token)
       VALUES (:productId, :status, :paidBy, :paymentRef, :token)`,
    ),
    order: db.prepare<[number], OrderRow>(
      'SELECT id, product_id, status, paid_by, payment_ref, last_token FROM orders WHERE id = ?',
    ),
    reject: db.prepare<{ target: string; token: number; lastToken: number; instance: string }>(
      `INSERT INTO rejected_writes (target, token, last_token, instance)
       VALUES (:target, :token, :lastToken, :instance)`,
    ),
  };
}

function toProduct(row: ProductRow): Product {
  return { id: row.id, name: row.name, stock: row.stock, lastToken: row.last_token };
}

function toOrder(row: OrderRow): Order {
  return {
    id: row.id,
    productId: row.product_id,
    status: row.status,
    paidBy: row.paid_by,
    paymentRef: row.payment_ref,
    lastToken: row.last_token,
  };
}
