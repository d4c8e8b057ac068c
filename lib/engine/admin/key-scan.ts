import type { Cluster, Redis } from 'ioredis';
import { bounded } from '../time-bound.js';

/**
 * Finding the keys of the resources whose name matches a Redis glob. The key
 * prefix is the app's text, so its glob characters are escaped; the resource
 * pattern is the caller's glob and is used as given.
 */

/** `text` with the glob characters of SCAN MATCH (`* ? [ ] \`) escaped, so it matches itself only. */
export function escapeGlob(text: string): string {
  return text.replace(/[*?[\]\\]/g, '\\$&');
}

/** The lock keys (`<prefix>{<resource>}`) of the resources matching `pattern`. */
export function lockKeyPattern(keyPrefix: string, pattern: string): string {
  return `${escapeGlob(keyPrefix)}{${pattern}}`;
}

/** The fence counters (`<prefix>{<resource>}:fence`) of the resources matching `pattern`. */
export function fenceKeyPattern(keyPrefix: string, pattern: string): string {
  return `${lockKeyPattern(keyPrefix, pattern)}:fence`;
}

/**
 * The keys of one client matching `match`, a SCAN page at a time, each page
 * bounded by `timeoutMs`. Stop early by leaving the loop. (A cluster's keys
 * are spread over its masters: scan each of them for all of them.)
 */
export async function* scanKeys(
  client: Redis | Cluster,
  match: string,
  timeoutMs: number,
): AsyncGenerator<string> {
  let cursor = '0';
  do {
    const [next, keys] = await bounded(
      client.scan(cursor, 'MATCH', match, 'COUNT', 1000),
      timeoutMs,
    );
    cursor = next;
    yield* keys;
  } while (cursor !== '0');
}
