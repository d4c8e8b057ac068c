import { ConflictException, GoneException } from '@nestjs/common';

/** 410: nothing left to sell. Answered without taking the lock when the stock already reads 0. */
export class SoldOutException extends GoneException {
  constructor(productId: number) {
    super({
      statusCode: 410,
      error: 'Gone',
      code: 'SOLD_OUT',
      message: `Product ${productId} is sold out.`,
    });
  }
}

/** 409: the order was paid before this request got its lock. */
export class AlreadyPaidException extends ConflictException {
  constructor(orderId: number, paidBy: string | null) {
    super({
      statusCode: 409,
      error: 'Conflict',
      code: 'ALREADY_PAID',
      message: `Order ${orderId} is already paid${paidBy ? ` (by ${paidBy})` : ''}.`,
    });
  }
}

/**
 * 409: the database refused the write because a newer lock holder wrote
 * first: this request's lock had run out (the process was paused past its
 * lease, say) and its fencing token is older than the one on the row.
 * Answered, logged and recorded, never dropped silently.
 */
export class StaleTokenException extends ConflictException {
  constructor(what: string, refused: { token: number; lastToken: number }) {
    super({
      statusCode: 409,
      error: 'Conflict',
      code: 'STALE_TOKEN',
      message:
        `Write to ${what} refused: its fencing token ${refused.token} is older than ${refused.lastToken}, ` +
        'the token of the lock holder that wrote it since. This request had lost its lock.',
      token: refused.token,
      lastToken: refused.lastToken,
    });
  }
}
