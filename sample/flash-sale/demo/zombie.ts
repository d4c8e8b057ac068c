import type { FlashSaleStore } from '../store/flash-sale.store.js';
import type { AppInstance } from './fleet.js';

/** How the scene's instances write the stock (their STOCK_WRITES). */
export type StockVariant = 'unfenced' | 'write-only' | 'claimed';

export interface ZombieOptions {
  /** The instance frozen after its read, while it holds the product's lock. */
  readonly zombie: AppInstance;
  /** The instance that takes the lock once the lease has run out, and sells in between. */
  readonly takeover: AppInstance;
  readonly variant: StockVariant;
  readonly store: FlashSaleStore;
  readonly product: { readonly id: number; readonly name: string };
  readonly stock: number;
  /** The lock's lease on the scene's instances (their LOCK_TTL_MS). */
  readonly leaseMs: number;
}

export interface ZombieResult {
  readonly variant: StockVariant;
  readonly zombie: string;
  readonly takeover: string;
  readonly leaseMs: number;
  readonly stockBefore: number;
  readonly zombieToken?: number;
  readonly takeoverToken?: number;
  /** The stock each read before writing: the same, since the zombie froze before its write. */
  readonly zombieRead?: number;
  readonly takeoverRead?: number;
  /** How long the zombie was frozen. */
  readonly pausedMs?: number;
  readonly zombieAnswer?: Reply;
  readonly takeoverAnswer?: Reply;
  /** Paid orders at the end, and the stock the database has. */
  readonly sold?: number;
  readonly stockAfter?: number;
  /** Sales the stock column does not account for: sold - (stockBefore - stockAfter). */
  readonly lostUpdates?: number;
  /** Writes refused by their fencing token, as recorded by the app. */
  readonly refusedWrites?: number;
  /** Set when the scene could not be played as written (not a verdict on the variant). */
  readonly problem?: string;
}

export interface Reply {
  readonly status: number;
  readonly code?: string;
  readonly token?: number;
  readonly lastToken?: number;
  readonly message?: string;
}

const HOLDING = /product (\d+): holding product:\d+ with fencing token (\d+), read stock (\d+)/;

/**
 * The zombie, as a read-modify-write: `zombie` takes the product's lock,
 * reads the stock and starts charging the card; it is frozen (SIGSTOP) right
 * there and its lease runs out in Redis. `takeover` gets the lock with a newer
 * token, reads the same stock and starts charging; it is held right there. The
 * zombie is thawed (SIGCONT) and writes the stock it computed from its old
 * read; then the takeover writes. With the stock claimed at the read
 * (`claimed`), the zombie's write is refused; fenced at the write only, or not
 * at all, both writes land and one sale is missing from the stock.
 *
 * Every step waits for an event (a log line, an HTTP answer, a process
 * state), except the lease running out, which takes the lease's time by nature.
 */
export async function runZombie(options: ZombieOptions): Promise<ZombieResult> {
  const { zombie, takeover, store, product, leaseMs, variant, stock } = options;
  store.restock(product.id, product.name, stock);
  const base = {
    variant,
    zombie: zombie.name,
    takeover: takeover.name,
    leaseMs,
    stockBefore: stock,
  };
  const path = `/products/${product.id}/purchase`;

  const zombieHolding = zombie.process.waitForLine(HOLDING, 10_000);
  let zombieAnswered = false;
  const zombieAnswer = call(zombie.url, path).then((reply) => {
    zombieAnswered = true;
    return reply;
  });
  zombieAnswer.catch(() => undefined); // awaited below; never an unhandled rejection meanwhile
  const [, , zombieToken, zombieRead] = (await zombieHolding).map(Number);
  await zombie.process.pause();
  const pausedAt = performance.now();
  // The zombie must be frozen before its write, or there is nothing to show.
  if (zombieAnswered) {
    await zombie.process.resume();
    return {
      ...base,
      zombieToken,
      problem: `${zombie.name} finished its sale before it could be frozen (the machine may be very busy)`,
    };
  }

  const takeoverHolding = takeover.process.waitForLine(HOLDING, 10_000);
  const takeoverAnswer = call(takeover.url, path);
  takeoverAnswer.catch(() => undefined);
  const [, , takeoverToken, takeoverRead] = (await takeoverHolding).map(Number);
  await takeover.process.pause();
  await zombie.process.resume();
  const pausedMs = Math.round(performance.now() - pausedAt);
  const zombieReply = await zombieAnswer;
  await takeover.process.resume();
  const takeoverReply = await takeoverAnswer;

  const audit = store.audit(product.id);
  return {
    ...base,
    zombieToken,
    takeoverToken,
    zombieRead,
    takeoverRead,
    pausedMs,
    zombieAnswer: zombieReply,
    takeoverAnswer: takeoverReply,
    sold: audit.sold,
    stockAfter: audit.stock,
    lostUpdates: audit.sold - (stock - audit.stock),
    refusedWrites: audit.rejectedWrites,
  };
}

/** What the scene must show for each variant; undefined when it did. */
export function zombieProblem(z: ZombieResult): string | undefined {
  if (z.problem) return z.problem;
  if (!(z.takeoverToken! > z.zombieToken!))
    return `${z.takeover} sold with token ${z.takeoverToken}, not newer than ${z.zombieToken}`;
  if (z.zombieRead !== z.takeoverRead)
    return `the two holders read different stocks (${z.zombieRead}, ${z.takeoverRead}): the interleaving did not happen`;
  if (z.takeoverAnswer?.status !== 201)
    return `${z.takeover} could not sell: ${z.takeoverAnswer?.status} ${z.takeoverAnswer?.message ?? ''}`;
  if (z.variant === 'claimed') {
    if (z.zombieAnswer?.status !== 409 || z.zombieAnswer.code !== 'STALE_TOKEN')
      return `${z.zombie}'s late write was not refused: it answered ${z.zombieAnswer?.status} ${z.zombieAnswer?.code ?? ''}`;
    if (z.lostUpdates !== 0 || z.sold !== 1)
      return `${z.sold} sold and ${z.lostUpdates} lost updates with claimed writes, not 1 and 0`;
    if (z.refusedWrites !== 1) return `the app recorded ${z.refusedWrites} refused writes, not 1`;
    return undefined;
  }
  // The contrast: the zombie's write went through, and the stock lost a sale.
  if (z.zombieAnswer?.status !== 201)
    return `${z.zombie} answered ${z.zombieAnswer?.status} ${z.zombieAnswer?.code ?? ''}, expected its write to go through`;
  if (z.lostUpdates !== 1) return `${z.lostUpdates} lost updates, expected 1`;
  return undefined;
}

async function call(base: string, path: string, body?: object): Promise<Reply & { id?: number }> {
  const response = await fetch(new URL(path, base), {
    method: 'POST',
    headers: body ? { 'content-type': 'application/json' } : {},
    body: body ? JSON.stringify(body) : undefined,
  });
  const json = (await response.json()) as Record<string, unknown>;
  const pick = <T>(key: string, type: string) =>
    typeof json[key] === type ? (json[key] as T) : undefined;
  return {
    status: response.status,
    id: pick<number>('id', 'number'),
    code: pick<string>('code', 'string'),
    token: pick<number>('token', 'number'),
    lastToken: pick<number>('lastToken', 'number'),
    message: pick<string>('message', 'string'),
  };
}
