import type { Cluster, Redis } from 'ioredis';
import { serverLabel, type LockNode } from './lock-node.js';
import { LockUnavailableError, type NodeFailure } from './lock-errors.js';
import { RAISE_FENCE } from './lua-scripts.js';
import { bounded } from './time-bound.js';
import { fenceKeyPattern, lockKeyPattern, scanKeys } from './admin/key-scan.js';

/** One node's view of a resource. */
export interface NodeLockState {
  readonly node: string;
  /** The value holding the lock key, or null when free; undefined when the node did not answer. */
  readonly holder: string | null | undefined;
  /** Remaining lease in ms (-2: no key, -1: no expiry). */
  readonly ttl: number | undefined;
  /**
   * The last token this node issued for the resource, or null: the higher of
   * the resource's counter and the node's own (which counts every resource,
   * `fenceCounter: 'node'`, so it is at least that token).
   */
  readonly fence: number | null | undefined;
  readonly error?: string;
}

/** What the nodes say about one resource. */
export interface LockInspection {
  readonly resource: string;
  /** True when a quorum of nodes holds the same value. */
  readonly held: boolean;
  /** That value, when held. */
  readonly holder: string | undefined;
  /** The shortest remaining lease among the nodes holding that value. */
  readonly ttl: number | undefined;
  /** The highest fence counter on any node: the last token issued. */
  readonly fence: number | undefined;
  readonly nodes: readonly NodeLockState[];
}

/** How a node answered a ping. */
export interface NodeHealth {
  readonly node: string;
  /** For a cluster: true when every master answered. */
  readonly up: boolean;
  /** Round trip in ms, when up (a cluster's slowest master). */
  readonly latency: number | undefined;
  readonly error: string | undefined;
  /** For a node that is a Redis Cluster: how each master answered. */
  readonly masters?: readonly NodeHealth[];
}

export interface LockHealth {
  /** True when at least a quorum of nodes answered. */
  readonly quorum: boolean;
  readonly required: number;
  readonly nodes: readonly NodeHealth[];
}

/** Node operations for administration: inspection, listing, forced release, fence re-seeding, health. */
export class LockAdmin {
  constructor(
    private readonly nodes: readonly LockNode[],
    private readonly keyPrefix: string,
    private readonly quorum: number,
    private readonly timeoutMs: number,
  ) {}

  /** The fence counter of a node that counts the tokens of all resources (`fenceCounter: 'node'`). */
  get nodeCounterKey(): string {
    return `${this.keyPrefix}fence`;
  }

  lockKey(resource: string): string {
    return `${this.keyPrefix}{${resource}}`;
  }

  async inspect(resource: string): Promise<LockInspection> {
    const key = this.lockKey(resource);
    const nodes = await Promise.all(
      this.nodes.map(async (node): Promise<NodeLockState> => {
        try {
          const reads = node.client.multi().get(key).pttl(key).get(`${key}:fence`);
          // The node's own counter too (fenceCounter 'node'); a cluster counts per resource only.
          if (node.keepsNodeCounter) reads.get(this.nodeCounterKey);
          const replies = await this.bounded(reads.exec());
          const [holder, ttl, ...counters] = (replies ?? []).map(([error, value]) => {
            if (error) throw error;
            return value;
          }) as [string | null, number, ...(string | null)[]];
          const known = counters.filter((c): c is string => c !== null).map(Number);
          const fence = known.length > 0 ? Math.max(...known) : null;
          return { node: node.label, holder, ttl, fence };
        } catch (error) {
          return {
            node: node.label,
            holder: undefined,
            ttl: undefined,
            fence: undefined,
            error: (error as Error).message,
          };
        }
      }),
    );
    return judgeInspection(resource, nodes, this.quorum);
  }

  /**
   * Locked resources matching `pattern` (a Redis glob on the resource name,
   * e.g. `order:*`), at most `limit` of them: those whose lock key stands on
   * a quorum of the nodes, or on as many as a held lock can show when some
   * nodes do not answer. A key left on fewer (an attempt that lost the vote,
   * a release still on its way to a slow node) is no lock and expires with
   * its lease.
   */
  async list(pattern = '*', limit = 1000): Promise<string[]> {
    const match = lockKeyPattern(this.keyPrefix, pattern);
    const seen = new Map<string, number>();
    const results = await Promise.allSettled(
      this.nodes.map(async (node) => {
        const found = new Set<string>();
        await Promise.all(
          node.servers().map(async (server) => {
            // Every match, not the first `limit`: the nodes scan in different orders, and a lock
            // counts only where a quorum of them show it.
            for await (const key of scanKeys(server, match, this.timeoutMs)) {
              found.add(key.slice(this.keyPrefix.length + 1, -1));
            }
          }),
        );
        return found;
      }),
    );
    for (const result of results) {
      if (result.status === 'fulfilled') {
        for (const resource of result.value) seen.set(resource, (seen.get(resource) ?? 0) + 1);
      }
    }
    // A held lock stands on a quorum of nodes, so any n - quorum + 1 nodes that answer show
    // every one of them; fewer could miss some, which is an error rather than a short list.
    const failures = this.failuresOf(results);
    if (this.nodes.length - failures.length < this.nodes.length - this.quorum + 1) {
      throw new LockUnavailableError(
        [pattern],
        failures,
        this.nodes.length - this.quorum + 1,
        this.nodes.length,
        'list',
      );
    }
    const needed = Math.max(1, this.quorum - failures.length);
    return [...seen]
      .filter(([, count]) => count >= needed)
      .map(([resource]) => resource)
      .sort()
      .slice(0, limit);
  }

  /**
   * Deletes the lock key of `resource` on every node, whoever holds it, and
   * wakes its waiters. For operators: the holder is not told and may go on
   * writing, which its fencing token guards against. Returns how many nodes
   * had the key.
   */
  async forceRelease(resource: string): Promise<number> {
    const key = this.lockKey(resource);
    const deleted = await Promise.all(
      this.nodes.map((node) =>
        this.bounded(node.client.del(key))
          .then(async (count) => {
            await node.notifyRelease(key).catch(() => undefined);
            return count;
          })
          .catch(() => 0),
      ),
    );
    return deleted.reduce((sum, n) => sum + n, 0);
  }

  /**
   * Raises every fence counter (matching `pattern`) on every node to the
   * highest value any node has for it, and each node's own counter
   * (`fenceCounter: 'node'`; not on a cluster) to the highest of those: the
   * procedure for a node that lost its data, before it serves locks again.
   * `ttl` is the lifetime in ms of the resources' counters (0: none).
   * Returns how many counters were raised, per node label. Every node must
   * answer: a node left out would keep its low counters, so this throws
   * instead, naming it.
   */
  async reseedFences(ttl: number, pattern = '*'): Promise<Record<string, number>> {
    const match = fenceKeyPattern(this.keyPrefix, pattern);
    const keys = new Set<string>([this.nodeCounterKey]);
    await this.everyNode(
      'read the fence counters of',
      async (node) => {
        await Promise.all(
          node.servers().map(async (server) => {
            for await (const key of scanKeys(server, match, this.timeoutMs)) keys.add(key);
          }),
        );
      },
      pattern,
    );
    // Every counter of every node at once (the clients pipeline the reads), then the raises.
    const list = [...keys];
    const values = new Map<LockNode, (string | null)[]>();
    const keeps = (node: LockNode, key: string) =>
      key !== this.nodeCounterKey || node.keepsNodeCounter;
    await this.everyNode(
      'read the fence counters of',
      async (node) => {
        const reads = list.map((key) => (keeps(node, key) ? node.client.get(key) : null));
        values.set(node, await this.bounded(Promise.all(reads)));
      },
      pattern,
    );
    const highest = list.map((_, k) =>
      Math.max(...this.nodes.map((node) => Number(values.get(node)![k] ?? 0))),
    );
    const raised: Record<string, number> = Object.fromEntries(this.nodes.map((n) => [n.label, 0]));
    await this.everyNode(
      'raise the fence counters of',
      async (node) => {
        const own = values.get(node)!;
        const results = await this.bounded(
          Promise.all(
            list.map((key, k) =>
              !keeps(node, key) || highest[k] === 0 || Number(own[k] ?? -1) >= highest[k]
                ? 0
                : // A node's own counter never expires.
                  node.run(RAISE_FENCE, [key], [highest[k], key === this.nodeCounterKey ? 0 : ttl]),
            ),
          ),
        );
        raised[node.label] = results.filter((r) => r === 1).length;
      },
      pattern,
    );
    return raised;
  }

  async health(): Promise<LockHealth> {
    const nodes = await Promise.all(
      this.nodes.map(async (node): Promise<NodeHealth> => {
        if (node.topology !== 'cluster') return this.ping(node.label, node.client);
        // A lock's keys can live on any master: the cluster serves locks only while all answer.
        const servers = node.servers();
        if (servers.length === 0) {
          const reason = node.connectionError?.message ?? 'the cluster is not connected';
          return { node: node.label, up: false, latency: undefined, error: reason, masters: [] };
        }
        const masters = await Promise.all(
          servers.map((server) => this.ping(serverLabel(server), server)),
        );
        const down = masters.filter((m) => !m.up);
        return {
          node: node.label,
          up: down.length === 0,
          latency: down.length === 0 ? Math.max(...masters.map((m) => m.latency!)) : undefined,
          error:
            down.length === 0
              ? undefined
              : `${down.length} of ${masters.length} masters down (${down.map((m) => `${m.node}: ${m.error}`).join('; ')})`,
          masters,
        };
      }),
    );
    return {
      quorum: nodes.filter((n) => n.up).length >= this.quorum,
      required: this.quorum,
      nodes,
    };
  }

  private async ping(label: string, client: Redis | Cluster): Promise<NodeHealth> {
    const start = performance.now();
    try {
      await this.bounded(client.ping());
      return { node: label, up: true, latency: performance.now() - start, error: undefined };
    } catch (error) {
      return { node: label, up: false, latency: undefined, error: (error as Error).message };
    }
  }

  /** Runs `work` on every node; throws LockUnavailableError naming the nodes that failed. */
  private async everyNode(
    what: string,
    work: (node: LockNode) => Promise<void>,
    about = '*',
  ): Promise<void> {
    const failures = this.failuresOf(await Promise.allSettled(this.nodes.map(work)));
    if (failures.length > 0) {
      throw new LockUnavailableError([about], failures, this.nodes.length, this.nodes.length, what);
    }
  }

  private failuresOf(results: readonly PromiseSettledResult<unknown>[]): NodeFailure[] {
    return results.flatMap((result, i) =>
      result.status === 'rejected'
        ? [{ node: this.nodes[i].label, error: this.nodes[i].explain(result.reason) }]
        : [],
    );
  }

  private bounded<T>(work: Promise<T>): Promise<T> {
    return bounded(work, this.timeoutMs);
  }
}

/**
 * What the nodes' answers about `resource` add up to: held when a
 * quorum holds the same value. Shared with the in-memory engine of the
 * testing entry point, so both judge alike.
 */
export function judgeInspection(
  resource: string,
  nodes: readonly NodeLockState[],
  quorum: number,
): LockInspection {
  const votes = new Map<string, number>();
  for (const n of nodes) if (n.holder) votes.set(n.holder, (votes.get(n.holder) ?? 0) + 1);
  const [holder, count] = [...votes].sort((a, b) => b[1] - a[1])[0] ?? [undefined, 0];
  const held = count >= quorum;
  const ttls = nodes.filter((n) => held && n.holder === holder).map((n) => n.ttl!);
  const fences = nodes.map((n) => n.fence).filter((f): f is number => typeof f === 'number');
  return {
    resource,
    held,
    holder: held ? holder : undefined,
    ttl: ttls.length > 0 ? Math.min(...ttls) : undefined,
    fence: fences.length > 0 ? Math.max(...fences) : undefined,
    nodes,
  };
}
