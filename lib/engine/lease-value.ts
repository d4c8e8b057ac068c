import { randomFillSync } from 'node:crypto';

/** 128-bit random values, drawn from a pooled buffer to keep crypto calls off the hot path. */
const pool = Buffer.allocUnsafe(16 * 256);
let offset = pool.length;

/** A lease's identity on the nodes: 128 random bits, base64url. */
export function leaseValue(): string {
  if (offset === pool.length) {
    randomFillSync(pool);
    offset = 0;
  }
  offset += 16;
  return pool.toString('base64url', offset - 16, offset);
}
