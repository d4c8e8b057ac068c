import type { LockNode } from '../lock-node.js';

/**
 * The error to show for a node's failed read: for a node that is not
 * connected, why (its connection's last error, or that it did not connect in
 * time) rather than ioredis's note that its stream is closed. `node` may be
 * undefined (a label no node has): the error is shown as it is.
 */
export function explainNodeError(
  node: LockNode | undefined,
  error: string | undefined,
): string | undefined {
  if (error === undefined) return undefined;
  if (!node || node.client.status === 'ready') return error;
  const cause = node.connectionError;
  return `not connected (${cause ? cause.message : 'it did not answer in time'})`;
}
