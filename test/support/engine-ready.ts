import type { LockEngine } from '../../lib/engine/index.js';

type NodeClient = LockEngine['nodes'][number]['client'];

/**
 * Resolves on the client's next 'ready'. Not `events.once(client, 'ready')`:
 * that rejects on the first 'error', and a client reconnecting to a node that
 * is still down (one of several restarted in parallel, not yet listening)
 * reports every refused attempt as one. Only 'end' means it stopped trying.
 */
export function nextReady(client: NodeClient): Promise<void> {
  return new Promise((resolve, reject) => {
    const onReady = () => {
      client.off('end', onEnd);
      resolve();
    };
    const onEnd = () => {
      client.off('ready', onReady);
      reject(new Error('the node client ended (closed, or it gave up reconnecting)'));
    };
    client.once('ready', onReady);
    client.once('end', onEnd);
  });
}

/** Resolves once every node client of the engine is connected again (after a node restart, say). */
export async function engineReady(...engines: LockEngine[]): Promise<void> {
  await Promise.all(
    engines.flatMap((engine) =>
      engine.nodes.map((node) =>
        node.client.status === 'ready' ? undefined : nextReady(node.client),
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
