/**
 * The Jest side of the redis-server harness (dev/redis/redis-nodes.ts, which
 * imports no test framework so the benchmark and the demo can load it too).
 *
 * ```ts
 * const redis = useRedisNodes(3);
 * it('...', async () => {
 *   const client = new Redis(redis.nodes[0].url);
 * });
 * ```
 */
import { afterAll, beforeAll } from '@jest/globals';
import {
  REDIS_START_TIMEOUT_MS,
  startRedisNodes,
  stopRedisNodes,
  type RedisNodeOptions,
  type RedisNodeProcess,
} from '../../dev/redis/redis-nodes.js';

export interface RedisNodesHandle {
  /** Filled in by beforeAll. */
  readonly nodes: RedisNodeProcess[];
}

/**
 * Starts `count` nodes in beforeAll and stops them in afterAll (which Jest runs
 * even when tests or beforeAll fail).
 */
export function useRedisNodes(count: number, options?: RedisNodeOptions): RedisNodesHandle {
  const handle = { nodes: [] as RedisNodeProcess[] };
  beforeAll(async () => {
    handle.nodes = await startRedisNodes(count, options);
  }, REDIS_START_TIMEOUT_MS * 2);
  afterAll(async () => {
    await stopRedisNodes(handle.nodes);
  });
  return handle;
}
