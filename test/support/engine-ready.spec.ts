import { afterAll, describe, expect, it } from '@jest/globals';
import { LockEngine } from '../../lib/engine/index.js';
import { engineReady } from './engine-ready.js';
import { useRedisNodes } from './use-redis-nodes.js';

describe('engineReady', () => {
  const redis = useRedisNodes(2);
  let engine: LockEngine | undefined;
  afterAll(() => engine?.close());

  it('waits through the connection errors of nodes that are still down while others restart', async () => {
    const [first, second] = redis.nodes;
    engine = new LockEngine({
      nodes: redis.nodes.map((n) => n.url),
      checkNodes: false,
      releaseNotifications: false,
      logger: { warn: () => undefined, error: () => undefined },
    });
    await engine.connect();
    await Promise.all([first.kill(), second.kill()]);
    // Nodes restarted in parallel come back one by one: while the first one's caller waits, the
    // engine's reconnection attempts to the second are refused.
    await first.restart();
    const ready = engineReady(engine).then(
      () => 'ready',
      (error: unknown) => String(error),
    );
    const refused = new Promise((resolve) => engine!.nodes[1].client.once('error', resolve));
    expect(String(await refused)).toMatch(/ECONNREFUSED/);
    await second.restart();
    expect(await ready).toBe('ready');
    expect(engine.nodes.map((n) => n.client.status)).toEqual(['ready', 'ready']);
  });
});
