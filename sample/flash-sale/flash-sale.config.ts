import { registerAs, type ConfigType } from '@nestjs/config';

/**
 * The app's settings, read from environment variables (or a `.env` file)
 * once at start-up, with messages that say what to change.
 *
 * | variable            | default                  | meaning                                                    |
 * | ------------------- | ------------------------ | ---------------------------------------------------------- |
 * | `LOCK_NODES`        | `redis://127.0.0.1:6379` | independent Redis nodes, comma-separated (1, 3 or 5)       |
 * | `LOCK_TTL_MS`       | `5000`                   | lease of a lock; extended while the work runs              |
 * | `ORDER_LOCK_TTL_MS` | `LOCK_TTL_MS`            | lease of the lock taken to pay an order                    |
 * | `LOCKS`             | `on`                     | `off` runs the purchase without a lock (to see the race)   |
 * | `PAYMENT_MS`        | `5`                      | latency of the payment provider at checkout                |
 * | `ORDER_PAYMENT_MS`  | `100`                    | latency of capturing the payment of a pending order        |
 * | `STOCK_WRITES`      | `claimed`                | `write-only` or `unfenced`: the weaker writes, for the demo |
 * | `DB_FILE`           | `flash-sale.sqlite`      | SQLite file, shared by every instance                      |
 * | `PORT`, `HOST`      | `3000`, `127.0.0.1`      | where to listen (`PORT=0`: any free port)                  |
 * | `INSTANCE`          | `app-<pid>`              | this instance's name in answers, logs and the database     |
 */
export const flashSaleConfig = registerAs('flashSale', () => {
  const env = process.env;
  const lockTtlMs = wholeNumber('LOCK_TTL_MS', env.LOCK_TTL_MS, 5000);
  return {
    lockNodes: nodes(env.LOCK_NODES ?? 'redis://127.0.0.1:6379'),
    lockTtlMs,
    orderLockTtlMs: wholeNumber('ORDER_LOCK_TTL_MS', env.ORDER_LOCK_TTL_MS, lockTtlMs),
    locks: onOff('LOCKS', env.LOCKS ?? 'on'),
    paymentMs: wholeNumber('PAYMENT_MS', env.PAYMENT_MS, 5, 0),
    orderPaymentMs: wholeNumber('ORDER_PAYMENT_MS', env.ORDER_PAYMENT_MS, 100, 0),
    stockWrites: stockWrites(env.STOCK_WRITES || 'claimed'),
    dbFile: env.DB_FILE || 'flash-sale.sqlite',
    port: wholeNumber('PORT', env.PORT, 3000, 0),
    host: env.HOST || '127.0.0.1',
    instance: env.INSTANCE || `app-${process.pid}`,
  };
});

export type FlashSaleConfig = ConfigType<typeof flashSaleConfig>;

function nodes(value: string): string[] {
  const list = value
    .split(',')
    .map((url) => url.trim())
    .filter(Boolean);
  if (list.length === 0) {
    throw new Error(
      'LOCK_NODES must list at least one Redis node, e.g. LOCK_NODES=redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379',
    );
  }
  return list;
}

function wholeNumber(name: string, value: string | undefined, fallback: number, min = 1): number {
  if (value === undefined || value === '') return fallback;
  const number = Number(value);
  if (!Number.isInteger(number) || number < min) {
    throw new Error(`${name} must be a whole number from ${min} (got '${value}').`);
  }
  return number;
}

/**
 * How a locked sale writes the stock. Only `claimed` is safe; the demo starts
 * instances with the other two to measure what they lose.
 */
function stockWrites(value: string): 'claimed' | 'write-only' | 'unfenced' {
  if (value === 'claimed' || value === 'write-only' || value === 'unfenced') return value;
  throw new Error(`STOCK_WRITES must be claimed, write-only or unfenced (got '${value}').`);
}

function onOff(name: string, value: string): boolean {
  if (/^(on|true|1|yes)$/i.test(value)) return true;
  if (/^(off|false|0|no)$/i.test(value)) return false;
  throw new Error(`${name} must be on or off (got '${value}').`);
}
