/**
 * Entries written into a read-write lock's or a semaphore's hashes directly,
 * as their scripts would have written them, for specs that need an entry in
 * a given state (one already past its expiry) without waiting for it.
 */
import { Redis } from 'ioredis';

/**
 * Sets `field` of the hash `key` on every node to `entry(expiry)`, the expiry
 * being `ms` from that node's clock (negative: already expired).
 */
export async function writeLeaseEntry(
  urls: readonly string[],
  key: string,
  field: string,
  entry: (expiry: number) => string,
  ms: number,
): Promise<void> {
  await Promise.all(
    urls.map(async (url) => {
      const client = new Redis(url);
      try {
        const [seconds, micros] = await client.time();
        const clock = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
        await client.hset(key, field, entry(clock + ms));
      } finally {
        client.disconnect();
      }
    }),
  );
}
