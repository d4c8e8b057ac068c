import { createHash } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';
import { LockOptionsError } from '../engine/lock-errors.js';
import {
  FencedColumnError,
  FencedRowNotClaimedError,
  FencedValueChangedError,
  FencedWriteRejectedError,
} from './fenced-errors.js';
import { checkToken } from './fenced-checks.js';

/** The fields of a Redis hash, as Redis returns them: strings. */
export type HashFields = Record<string, string>;

export interface RedisFenceOptions {
  /** The hash field that keeps the largest token that claimed or wrote the hash. Default: `fence_token`. */
  readonly tokenField?: string;
}

export interface FencedHashWriteOptions {
  /**
   * Writes without a claim, on condition that the hash still holds these
   * values (`null`: the field is absent) and no newer token claimed it.
   */
  readonly expect?: Readonly<Record<string, string | number | null>>;
}

/**
 * State kept in a Redis hash, written by lock holders and fenced by their
 * tokens, the same way as {@link FencedTable} rows: each call is one script,
 * so the check and the change are atomic. The token is kept in a field of the
 * hash itself, so a Redis Cluster finds both in one slot.
 */
export interface FencedHash {
  /** Reads the hash and claims it with `token` (a hash that does not exist is created by the claim). */
  claim(key: string, token: number): Promise<HashFields>;
  /** Sets `fields` where the hash still carries `token` (or, with `expect`, holds those values). */
  write(
    key: string,
    token: number,
    fields: Readonly<Record<string, string | number>>,
    options?: FencedHashWriteOptions,
  ): Promise<HashFields>;
  /** Claim, compute, write. */
  update(
    key: string,
    token: number,
    change: (
      fields: HashFields,
    ) => Record<string, string | number> | Promise<Record<string, string | number>>,
  ): Promise<HashFields>;
}

// Tokens compare as Lua numbers (doubles): exact for every integer up to 2^53. Replies carry the
// stored string, never a Lua number turned back into text (which %.14g would round).
const READ_TOKEN = `
local raw = redis.call('HGET', KEYS[1], ARGV[2])
local last = 0
if raw then
  last = tonumber(raw)
  if last == nil or last ~= math.floor(last) or last < 0 then return {'bad', raw} end
end
local token = tonumber(ARGV[1])
if last > token then return {'newer', raw} end`;

/** KEYS: the hash. ARGV: token, token field. */
const CLAIM = `${READ_TOKEN}
redis.call('HSET', KEYS[1], ARGV[2], ARGV[1])
return {'ok', redis.call('HGETALL', KEYS[1])}`;

/**
 * KEYS: the hash. ARGV: token, token field, number of expected fields n,
 * n triples (field, '1' present or '0' absent, value), then field/value pairs to set.
 */
const WRITE = `${READ_TOKEN}
local n = tonumber(ARGV[3])
if n == 0 then
  if last ~= token then return {'unclaimed', raw or '0'} end
else
  for i = 0, n - 1 do
    local have = redis.call('HGET', KEYS[1], ARGV[4 + 3 * i])
    local want = ARGV[5 + 3 * i] == '1' and ARGV[6 + 3 * i] or false
    if have ~= want then return {'changed', raw or '0'} end
  end
end
local set = {}
for i = 4 + 3 * n, #ARGV do set[#set + 1] = ARGV[i] end
set[#set + 1] = ARGV[2]
set[#set + 1] = ARGV[1]
redis.call('HSET', KEYS[1], unpack(set))
return {'ok', redis.call('HGETALL', KEYS[1])}`;

const sha1 = (script: string) => createHash('sha1').update(script).digest('hex');
const SCRIPTS = {
  claim: { source: CLAIM, sha: sha1(CLAIM) },
  write: { source: WRITE, sha: sha1(WRITE) },
};

/**
 * Fenced writes to Redis hashes through ioredis (a standalone client or a
 * Cluster). Use a Redis whose writes survive a restart (AOF, `appendfsync
 * always`): a token forgotten by a restart lets an older holder in again.
 *
 * ```ts
 * const stock = redisFence(redis);
 * const { units } = await stock.claim('stock:7', lock.token!);
 * await stock.write('stock:7', lock.token!, { units: Number(units) - 1 });
 * ```
 */
export function redisFence(client: Redis | Cluster, options: RedisFenceOptions = {}): FencedHash {
  const tokenField = options.tokenField ?? 'fence_token';
  if (typeof tokenField !== 'string' || tokenField === '') {
    throw new LockOptionsError('tokenField must name a hash field, e.g. fence_token.');
  }

  async function run(
    script: (typeof SCRIPTS)['claim'],
    key: string,
    args: string[],
  ): Promise<[string, string | string[]]> {
    try {
      return (await client.evalsha(script.sha, 1, key, ...args)) as [string, string | string[]];
    } catch (error) {
      // Not cached on this server yet (first call, a restart, SCRIPT FLUSH): send it once in full.
      if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT')) throw error;
      return (await client.eval(script.source, 1, key, ...args)) as [string, string | string[]];
    }
  }

  const target = (key: string) => `redis hash ${key}`;

  function fields(reply: string | string[]): HashFields {
    const list = Array.isArray(reply) ? reply : [];
    const result: HashFields = {};
    for (let i = 0; i + 1 < list.length; i += 2) {
      if (list[i] !== tokenField) result[list[i]!] = list[i + 1]!;
    }
    return result;
  }

  function refusal(
    key: string,
    token: number,
    action: 'claim' | 'write',
    status: string,
    raw: string | string[],
  ): Error {
    const found = String(raw);
    if (status === 'bad') {
      return new FencedColumnError(
        target(key),
        tokenField,
        `'${found}'`,
        `The field must hold a whole number (a token) or be absent; another writer put something else there: give the tokens a field of their own (tokenField).`,
      );
    }
    if (status === 'newer')
      return new FencedWriteRejectedError(target(key), token, Number(found), action);
    if (status === 'unclaimed')
      return new FencedRowNotClaimedError(target(key), token, Number(found));
    return new Error(`Unexpected reply from the fenced-write script: ${status}`);
  }

  function checkKey(key: string): void {
    if (typeof key !== 'string' || key === '') {
      throw new LockOptionsError(`The key must be a Redis key name; got ${JSON.stringify(key)}.`);
    }
  }

  function pairs(values: Readonly<Record<string, string | number>>, what: string): string[] {
    if (values === null || typeof values !== 'object') {
      throw new LockOptionsError(`The ${what} must be an object of hash fields and values.`);
    }
    return Object.entries(values).flatMap(([field, value]) => {
      if (field === tokenField) {
        throw new LockOptionsError(
          `Do not write ${tokenField} yourself: it keeps the tokens, and the fenced write sets it.`,
        );
      }
      if (typeof value !== 'string' && typeof value !== 'number') {
        throw new LockOptionsError(`Field ${field} must be written as a string or a number.`);
      }
      return [field, String(value)];
    });
  }

  const hash: FencedHash = {
    async claim(key, token) {
      checkKey(key);
      checkToken(token);
      const [status, reply] = await run(SCRIPTS.claim, key, [String(token), tokenField]);
      if (status !== 'ok') throw refusal(key, token, 'claim', status, reply);
      return fields(reply);
    },

    async write(key, token, values, options) {
      checkKey(key);
      checkToken(token);
      const set = pairs(values, 'fields to write');
      const expect = Object.entries(options?.expect ?? {});
      if (options?.expect && expect.length === 0) {
        throw new LockOptionsError(
          'expect names no field: give the values the write was computed from, or claim() the hash and write without expect.',
        );
      }
      const expected = expect.flatMap(([field, value]) =>
        value === null ? [field, '0', ''] : [field, '1', String(value)],
      );
      const [status, reply] = await run(SCRIPTS.write, key, [
        String(token),
        tokenField,
        String(expect.length),
        ...expected,
        ...set,
      ]);
      if (status === 'changed') {
        // Read back for the message only: the refusal itself was atomic.
        const names = expect.map(([field]) => field);
        const now = await client.hmget(key, ...names);
        throw new FencedValueChangedError(
          target(key),
          token,
          Object.fromEntries(expect),
          Object.fromEntries(names.map((field, i) => [field, now[i] ?? null])),
        );
      }
      if (status !== 'ok') throw refusal(key, token, 'write', status, reply);
      return fields(reply);
    },

    async update(key, token, change) {
      const current = await hash.claim(key, token);
      return hash.write(key, token, await change(current));
    },
  };
  return hash;
}
