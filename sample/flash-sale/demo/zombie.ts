import type { FlashSaleStore, Order } from '../store/flash-sale.store.js';
import type { AppInstance } from './fleet.js';

export interface ZombieOptions {
  /** The instance that is frozen while it holds the order's lock. */
  readonly zombie: AppInstance;
  /** The instance that takes the order over once the lease has run out. */
  readonly takeover: AppInstance;
  readonly store: FlashSaleStore;
  readonly productId: number;
  /** The order lock's lease (ORDER_LOCK_TTL_MS of the instances). */
  readonly leaseMs: number;
}

export interface ZombieResult {
  /** True when the zombie's late write was refused and the order was paid once, by the takeover. */
  readonly ok: boolean;
  /** Why not, when not ok. */
  readonly problem?: string;
  readonly orderId: number;
  readonly zombie: string;
  readonly takeover: string;
  readonly leaseMs: number;
  readonly zombieToken?: number;
  readonly takeoverToken?: number;
  /** How long the zombie was frozen. */
  readonly pausedMs?: number;
  /** How long the takeover's request took: waiting for the lease to run out, then paying. */
  readonly takeoverMs?: number;
  readonly takeoverAnswer?: Reply;
  readonly zombieAnswer?: Reply;
  /** The order as the database has it at the end. */
  readonly order?: Order;
  /** Writes to the order its fencing token refused, as recorded by the app. */
  readonly rejectedWrites?: number;
}

export interface Reply {
  readonly status: number;
  readonly code?: string;
  readonly token?: number;
  readonly lastToken?: number;
  readonly paidBy?: string;
  readonly message?: string;
}

/**
 * The zombie: `zombie` takes the lock on a pending order and starts charging
 * the card; it is frozen (SIGSTOP) right there. Its lease runs out in Redis;
 * `takeover` waits for the lock, gets it with a newer token, pays the order
 * and writes. Then the zombie is thawed (SIGCONT) and finishes its work with
 * its old token: the database must refuse that write.
 *
 * Every step waits for an event (a log line, an HTTP answer, a process state),
 * except the lease running out, which takes the lease's time by nature.
 */
export async function runZombie(options: ZombieOptions): Promise<ZombieResult> {
  const { zombie, takeover, store, leaseMs } = options;
  const created = await call(zombie.url, '/orders', { productId: options.productId });
  if (created.status !== 201 || typeof created.id !== 'number') {
    throw new Error(
      `${zombie.name} could not create an order: ${created.status} ${created.message}`,
    );
  }
  const orderId = created.id;
  const base = { orderId, zombie: zombie.name, takeover: takeover.name, leaseMs };

  const holding = zombie.process.waitForLine(
    new RegExp(`order ${orderId}: holding order:${orderId} with fencing token (\\d+)`),
    10_000,
  );
  let zombieAnswered = false;
  const zombieAnswer = call(zombie.url, `/orders/${orderId}/pay`).then((reply) => {
    zombieAnswered = true;
    return reply;
  });
  zombieAnswer.catch(() => undefined); // awaited below; never an unhandled rejection meanwhile
  const zombieToken = Number((await holding)[1]);
  await zombie.process.pause();
  const pausedAt = performance.now();

  // The zombie must be frozen before its write, or there is nothing to show.
  if (zombieAnswered || store.order(orderId)?.status !== 'pending') {
    await zombie.process.resume();
    await zombieAnswer.catch(() => undefined);
    return {
      ...base,
      ok: false,
      zombieToken,
      problem: `${zombie.name} finished paying before it could be frozen (the machine may be very busy)`,
    };
  }

  const takeoverStarted = performance.now();
  const takeoverAnswer = await call(takeover.url, `/orders/${orderId}/pay`);
  const takeoverMs = Math.round(performance.now() - takeoverStarted);
  await zombie.process.resume();
  const pausedMs = Math.round(performance.now() - pausedAt);
  const answer = await zombieAnswer;
  const final = store.order(orderId);
  const rejectedWrites = store.rejectedWrites(`order:${orderId}`);
  const takeoverToken = takeoverAnswer.lastToken;

  const result = {
    ...base,
    zombieToken,
    takeoverToken,
    pausedMs,
    takeoverMs,
    takeoverAnswer,
    zombieAnswer: answer,
    order: final,
    rejectedWrites,
  };
  const problem =
    takeoverAnswer.status !== 200
      ? `${takeover.name} could not take the order over: ${takeoverAnswer.status} ${takeoverAnswer.message ?? ''}`
      : !(takeoverToken !== undefined && takeoverToken > zombieToken)
        ? `${takeover.name} paid with token ${takeoverToken}, not newer than ${zombieToken}`
        : answer.status !== 409 || answer.code !== 'STALE_TOKEN'
          ? `${zombie.name}'s late write was not refused: it answered ${answer.status} ${answer.code ?? ''}`
          : final?.paidBy !== takeover.name || final.lastToken !== takeoverToken
            ? `order ${orderId} ended as ${JSON.stringify(final)}`
            : rejectedWrites !== 1
              ? `the app recorded ${rejectedWrites} refused writes to order ${orderId}, not 1`
              : undefined;
  return problem ? { ...result, ok: false, problem } : { ...result, ok: true };
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
    paidBy: pick<string>('paidBy', 'string'),
    message: pick<string>('message', 'string'),
  };
}
