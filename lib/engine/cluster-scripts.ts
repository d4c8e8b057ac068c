import { ACQUIRE, EXTEND, FENCE_WRITEBACK, RELEASE, type LuaScript } from './lua-scripts.js';

/**
 * Scripts on a Redis Cluster node. A script's keys must share one hash slot
 * (else CROSSSLOT). One resource's lock key and fence counter do:
 * `<prefix>{<resource>}` and `<prefix>{<resource>}:fence` hash on the same
 * tag. The keys of different resources usually do not, so a multi-resource
 * call is split into one call per slot, sent in parallel (auto-pipelining
 * batches the calls bound for the same master), and the replies are merged
 * into the one reply the engine expects from a node.
 *
 * All-or-nothing on the cluster, as on a single server: an acquisition that
 * is refused (or fails) in any slot is rolled back (compare-and-delete) in
 * every slot before the node answers "no". Unlike a single server, the
 * slots are not taken atomically together: for the moment between the calls
 * and the rollback, another client can see part of the set held and be
 * refused. That costs it a retry, never safety: no key is ever held by two
 * values, and a grant counts only when every slot granted it.
 */

/** CRC16/XMODEM, the checksum Redis Cluster maps keys to slots with. */
const CRC16_TABLE = (() => {
  const table = new Uint16Array(256);
  for (let i = 0; i < 256; i++) {
    let crc = i << 8;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1;
    table[i] = crc & 0xffff;
  }
  return table;
})();

/** The hash slot (0 to 16383) of a key, hash tags (`{...}`) included. */
export function hashSlot(key: string): number {
  const open = key.indexOf('{');
  if (open >= 0) {
    const close = key.indexOf('}', open + 1);
    if (close > open + 1) key = key.slice(open + 1, close);
  }
  let crc = 0;
  for (const byte of Buffer.from(key)) {
    crc = ((crc << 8) & 0xffff) ^ CRC16_TABLE[((crc >> 8) ^ byte) & 0xff];
  }
  return crc & 16383;
}

type Args = readonly (string | number)[];
type Call = readonly [keys: readonly string[], args: Args];
/** Runs one call whose keys share a slot. */
export type RunInSlot = (
  script: LuaScript,
  keys: readonly string[],
  args: Args,
) => Promise<unknown>;

/** How a script's KEYS and ARGV divide by resource, and how the parts' replies merge. */
interface Layout {
  /** How many resources (lock keys, which come first in KEYS) the call covers. */
  resources(keys: readonly string[], args: Args): number;
  /** The call for the resources at `indices`. */
  part(keys: readonly string[], args: Args, indices: readonly number[], n: number): Call;
  /** The node's reply from the parts' replies (all fulfilled). */
  merge(replies: readonly unknown[], parts: readonly (readonly number[])[], n: number): unknown;
}

const pick = <T>(list: readonly T[], indices: readonly number[], offset = 0): T[] =>
  indices.map((i) => list[offset + i]);

const everyOne = (replies: readonly unknown[]) => (replies.every((r) => r === 1) ? 1 : 0);

/** A release message on a cluster is a shard message: see RELEASE. */
const shardNotify = (notify: string | number) => (notify === '1' ? 's' : notify);

const LAYOUTS = new Map<LuaScript, Layout>([
  [
    // KEYS: n lock keys (a cluster counts tokens per resource). ARGV: value, ttl, n, fencing, seed, counter ttl, ...
    ACQUIRE,
    {
      resources: (_, args) => Number(args[2]),
      part: (keys, args, indices) => [
        pick(keys, indices),
        [args[0], args[1], indices.length, ...args.slice(3)],
      ],
      merge: (replies, parts, n) => {
        const tokens = new Array<number>(n);
        parts.forEach((indices, p) => {
          const reply = replies[p] as number[];
          indices.forEach((resource, j) => (tokens[resource] = reply[j + 1]));
        });
        return reply1(tokens);
      },
    },
  ],
  [
    // KEYS: n lock keys, then their n fence keys. ARGV: value, counter ttl, n tokens.
    FENCE_WRITEBACK,
    {
      resources: (keys) => keys.length / 2,
      part: (keys, args, indices, n) => [
        [...pick(keys, indices), ...pick(keys, indices, n)],
        [args[0], args[1], ...pick(args, indices, 2)],
      ],
      merge: everyOne,
    },
  ],
  [
    // KEYS: the lock keys. ARGV: value, ttl.
    EXTEND,
    {
      resources: (keys) => keys.length,
      part: (keys, args, indices) => [pick(keys, indices), args],
      merge: everyOne,
    },
  ],
  [
    // KEYS: the lock keys. ARGV: value, notify, sender.
    RELEASE,
    {
      resources: (keys) => keys.length,
      part: (keys, args, indices) => [
        pick(keys, indices),
        [args[0], shardNotify(args[1]), ...args.slice(2)],
      ],
      merge: (replies) => replies.reduce((sum: number, r) => sum + Number(r), 0),
    },
  ],
]);

/** A granted acquire reply: 1, then the tokens (none without fencing). */
function reply1(tokens: readonly (number | undefined)[]): number[] {
  return tokens.every((t) => t === undefined) ? [1] : [1, ...(tokens as number[])];
}

/** Resource indices grouped by the slot of their lock key, in order of first appearance. */
function groupBySlot(lockKeys: readonly string[]): number[][] {
  const groups = new Map<number, number[]>();
  lockKeys.forEach((key, i) => {
    const slot = hashSlot(key);
    const group = groups.get(slot);
    if (group) group.push(i);
    else groups.set(slot, [i]);
  });
  return [...groups.values()];
}

/**
 * Runs `script` on a cluster: as one call when its keys share a slot, else
 * one call per slot with the replies merged (and, for an acquisition that
 * was not granted everywhere, rolled back everywhere first).
 */
export async function runBySlot(
  script: LuaScript,
  keys: readonly string[],
  args: Args,
  run: RunInSlot,
): Promise<unknown> {
  const layout = LAYOUTS.get(script);
  if (!layout) return run(script, keys, args);
  const n = layout.resources(keys, args);
  const parts = groupBySlot(keys.slice(0, n));
  const calls = parts.map((indices) => layout.part(keys, args, indices, n));
  if (calls.length === 1) return run(script, ...calls[0]);
  const settled = await Promise.allSettled(calls.map((call) => run(script, ...call)));
  const granted =
    script !== ACQUIRE ||
    settled.every((s) => s.status === 'fulfilled' && (s.value as number[])[0] === 1);
  if (!granted) {
    // Compare-and-delete in every slot (ours only), so the node holds all or none.
    const value = args[0];
    await Promise.allSettled(
      parts.map((indices) => run(RELEASE, pick(keys, indices), [value, 's'])),
    );
  }
  const failure = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
  if (failure) throw failure.reason;
  const replies = settled.map((s) => (s as PromiseFulfilledResult<unknown>).value);
  if (granted) return layout.merge(replies, parts, n);
  // Refused: the longest remaining lease among the holders (-1: one never expires).
  const leases = replies
    .filter((r) => (r as number[])[0] === 0)
    .map((r) => Number((r as number[])[1]));
  return [0, leases.includes(-1) ? -1 : Math.max(...leases)];
}
