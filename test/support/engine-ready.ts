import { once } from 'node:events';
import type { LockEngine } from '../../lib/engine/index.js';

/** Resolves once every node client of the engine is connected again (after a node restart, say). */
export async function engineReady(...engines: LockEngine[]): Promise<void> {
  await Promise.all(
    engines.flatMap((engine) =>
      engine.nodes.map((node) =>
        node.client.status === 'ready' ? undefined : once(node.client, 'ready'),
      ),
    ),
  );
}

/** After a fault test: every node serving again (resumed or restarted), and the engines connected to it. */
export async function nodesBack(
  nodes: readonly { ensureRunning(): Promise<void> }[],
  ...engines: LockEngine[]
): Promise<void> {
  await Promise.all(nodes.map((n) => n.ensureRunning()));
  await engineReady(...engines);
}
