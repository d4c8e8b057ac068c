import type { LockAdmin } from './lock-admin.js';
import type { LockEngine } from './lock-engine.js';
import type { LockError } from './lock-errors.js';
import type { NodeResults } from './lock-events.js';
import type { LockNode } from './lock-node.js';
import type { ResolvedRetry, RetryOptions } from './lock-options.js';
import type { EngineParts } from './lease-primitive.js';
import type { RestartWatch } from './node-restarts.js';
import type { ReleaseChannel } from './release-channel.js';
import type { WaitQueues } from './wait-queue.js';
import { ReadWriteLock } from './read-write-lock.js';
import { Semaphore } from './semaphore.js';
import { normalizeResources } from './lock-engine.js';

/**
 * The engine members a read-write lock or a semaphore runs on besides its
 * public ones. Read here rather than passed by the engine so that these
 * primitives live in files of their own; the tests of both primitives go
 * through every one of them, so a renamed member fails them at once.
 */
interface EngineInternals {
  readonly admin: LockAdmin;
  readonly queues: WaitQueues;
  readonly channel: ReleaseChannel | undefined;
  readonly sender: string;
  readonly notify: '1' | '0';
  readonly clockOffset: number;
  readonly restarts: readonly RestartWatch[];
  /** Aborted when the engine begins to drain (absent in engines without a graceful shutdown). */
  readonly closing?: AbortController;
  readonly closed: boolean;
  nodeTimeout(ttl: number): number;
  drift(ttl: number): number;
  retryPolicy(retry: RetryOptions): ResolvedRetry;
  countsForAll(node: LockNode): boolean;
  failed(
    request: { readonly resources: readonly string[] },
    attempts: number,
    error: LockError,
    nodes?: NodeResults,
  ): LockError;
}

const parts = new WeakMap<LockEngine, EngineParts>();
const NEVER = new AbortController().signal;

/** What read-write locks and semaphores share with `engine`, built once per engine. */
export function leaseParts(engine: LockEngine): EngineParts {
  let shared = parts.get(engine);
  if (shared) return shared;
  const inner = engine as unknown as EngineInternals;
  shared = {
    nodes: engine.nodes,
    quorum: engine.quorum,
    options: engine.options,
    resourceName: (resource) => normalizeResources(resource)[0],
    lockKey: (resource) => inner.admin.lockKey(resource),
    counter: (node, lockKey) =>
      inner.countsForAll(node)
        ? { key: inner.admin.nodeCounterKey, ttl: 0 }
        : { key: `${lockKey}:fence`, ttl: engine.options.fenceCounterTtl },
    nodeTimeout: (ttl) => inner.nodeTimeout(ttl),
    drift: (ttl) => inner.drift(ttl),
    // On the nodes' clock, as the engine's own waiters rank themselves.
    arrival: () => performance.timeOrigin + performance.now() + inner.clockOffset,
    excluded: (i) => inner.restarts[i].excluded(),
    pending: (i) => inner.restarts[i].pending(),
    queues: inner.queues,
    channel: inner.channel,
    notify: inner.notify,
    sender: inner.sender,
    closing: inner.closing?.signal ?? NEVER,
    isClosed: () => inner.closed,
    retryPolicy: (retry) => inner.retryPolicy(retry),
    failed: (request, attempts, error, nodes) => inner.failed(request, attempts, error, nodes),
  };
  parts.set(engine, shared);
  return shared;
}

/**
 * Many readers or one writer on `resource`, over `engine`'s nodes
 * (docs/read-write-locks.md).
 */
export function readWriteLock(engine: LockEngine, resource: string): ReadWriteLock {
  return new ReadWriteLock(leaseParts(engine), resource);
}

/**
 * At most `permits` holders of `name` at once across every instance, over
 * `engine`'s nodes (docs/semaphores.md).
 */
export function semaphore(engine: LockEngine, name: string, permits: number): Semaphore {
  return new Semaphore(leaseParts(engine), name, permits);
}
