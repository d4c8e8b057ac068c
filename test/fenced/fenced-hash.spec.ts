/** The Redis-side fenced writes of `nestjs-redis-lock/fenced` against a real redis-server. */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Redis } from 'ioredis';
import { LockOptionsError } from '../../lib/engine/index.js';
import {
  FencedColumnError,
  FencedRowNotClaimedError,
  FencedValueChangedError,
  FencedWriteRejectedError,
  redisFence,
} from '../../lib/fenced/index.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';

const redis = useRedisNodes(1);
let client: Redis;
let keys = 0;
const freshKey = () => `stock:${++keys}`;

beforeAll(() => {
  client = new Redis(redis.nodes[0]!.url);
});

afterAll(async () => {
  await client?.quit();
});

describe('fenced Redis hashes', () => {
  it('claims a hash as it reads it and writes where the claim still stands', async () => {
    const stock = redisFence(client);
    const key = freshKey();
    await client.hset(key, 'units', '10');
    const read = await stock.claim(key, 7);
    expect(read).toEqual({ units: '10' });
    expect(await stock.write(key, 7, { units: Number(read.units) - 1 })).toEqual({ units: '9' });
    expect(await stock.update(key, 7, (h) => ({ units: Number(h.units) - 1 }))).toEqual({
      units: '8',
    });
    expect(await client.hgetall(key)).toEqual({ units: '8', fence_token: '7' });
  });

  it('refuses the write of a holder paused after its read once a newer holder has read', async () => {
    const stock = redisFence(client);
    const key = freshKey();
    await client.hset(key, 'units', '10');
    const zombie = await stock.claim(key, 100);
    const next = await stock.claim(key, 101);
    const error = await stock
      .write(key, 100, { units: Number(zombie.units) - 1 })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(FencedWriteRejectedError);
    expect(error).toMatchObject({
      code: 'FENCED_WRITE_REJECTED',
      target: `redis hash ${key}`,
      token: 100,
      newerToken: 101,
      action: 'write',
    });
    await stock.write(key, 101, { units: Number(next.units) - 1 });
    await expect(stock.claim(key, 100)).rejects.toMatchObject({ action: 'claim', newerToken: 101 });
    expect(await client.hgetall(key)).toEqual({ units: '9', fence_token: '101' });
  });

  it('refuses an unclaimed write, and creates a hash on its first claim', async () => {
    const stock = redisFence(client, { tokenField: 'tok' });
    const key = freshKey();
    await expect(stock.write(key, 3, { units: 1 })).rejects.toBeInstanceOf(
      FencedRowNotClaimedError,
    );
    expect(await client.exists(key)).toBe(0);
    expect(await stock.claim(key, 3)).toEqual({});
    await stock.write(key, 3, { units: 1 });
    await expect(stock.write(key, 4, { units: 2 })).rejects.toMatchObject({
      name: 'FencedRowNotClaimedError',
      token: 4,
      rowToken: 3,
    });
    expect(await client.hgetall(key)).toEqual({ units: '1', tok: '3' });
  });

  it('writes on condition of the values read (expect), and refuses when they changed', async () => {
    const stock = redisFence(client);
    const key = freshKey();
    await stock.write(key, 1, { units: 5 }, { expect: { units: null } });
    const error = await stock
      .write(key, 2, { units: 5 }, { expect: { units: null } })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(FencedValueChangedError);
    expect(error).toMatchObject({ expected: { units: null }, actual: { units: '5' } });
    await stock.write(key, 2, { units: 4 }, { expect: { units: 5 } });
    await expect(stock.write(key, 1, { units: 3 }, { expect: { units: 4 } })).rejects.toMatchObject(
      {
        name: 'FencedWriteRejectedError',
        newerToken: 2,
      },
    );
    expect(await client.hgetall(key)).toEqual({ units: '4', fence_token: '2' });
  });

  it('keeps tokens up to 2^53 exact, though Lua compares them as doubles', async () => {
    const stock = redisFence(client);
    const key = freshKey();
    const big = Number.MAX_SAFE_INTEGER - 1;
    await stock.update(key, big, () => ({ units: 1 }));
    await expect(stock.claim(key, big - 1)).rejects.toMatchObject({
      token: big - 1,
      newerToken: big,
    });
    await stock.update(key, big + 1, () => ({ units: 2 }));
    expect(await client.hget(key, 'fence_token')).toBe(String(Number.MAX_SAFE_INTEGER));
  });

  it('refuses a token field that holds something else than a token, and bad arguments', async () => {
    const stock = redisFence(client);
    const key = freshKey();
    await client.hset(key, 'fence_token', 'abc');
    await expect(stock.claim(key, 1)).rejects.toBeInstanceOf(FencedColumnError);
    await expect(stock.claim(freshKey(), 0)).rejects.toBeInstanceOf(LockOptionsError);
    await expect(stock.write(freshKey(), 1, { fence_token: 9 })).rejects.toThrow(
      /Do not write fence_token/,
    );
  });

  it('loads its scripts again after the server forgot them', async () => {
    const stock = redisFence(client);
    const key = freshKey();
    await stock.claim(key, 1);
    await client.script('FLUSH');
    await stock.update(key, 2, () => ({ units: 1 }));
    expect(await client.hgetall(key)).toEqual({ units: '1', fence_token: '2' });
  });
});
