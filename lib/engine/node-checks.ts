import type { Redis } from 'ioredis';
import { LockConfigurationError } from './lock-errors.js';
import { serverLabel, type LockNode } from './lock-node.js';
import { LOCK_DEFAULTS, type ResolvedEngineOptions } from './lock-options.js';
import { bounded } from './time-bound.js';

/** What the checks read off one server (a node, or a master of a cluster node). */
export interface ServerFacts {
  readonly runId: string | undefined;
  readonly role: string | undefined;
  readonly replicas: number;
  readonly aofEnabled: boolean | undefined;
  /** `undefined` where CONFIG is disabled (managed Redis services). */
  readonly appendfsync: string | undefined;
  readonly maxmemory: number;
  readonly maxmemoryPolicy: string | undefined;
  /** The server runs in cluster mode (INFO cluster_enabled). */
  readonly clusterEnabled?: boolean;
  /** The master's name, when the node reaches its master through Sentinel. */
  readonly sentinel?: string;
}

/** What the checks read off a node given as a Redis Cluster: the facts of each master. */
export interface ClusterFacts {
  readonly masters: readonly { readonly label: string; readonly facts: ServerFacts }[];
}

/** What the checks read off one node: its server, or the masters of a cluster. */
export type NodeFacts = ServerFacts | ClusterFacts;

/** Parses the `field:value` lines of INFO. */
export function parseInfo(info: string): Map<string, string> {
  const fields = new Map<string, string>();
  for (const line of info.split('\n')) {
    const colon = line.indexOf(':');
    if (colon > 0 && !line.startsWith('#'))
      fields.set(line.slice(0, colon), line.slice(colon + 1).trim());
  }
  return fields;
}

/** The facts of a node: of its server, or of every master of a cluster. */
export async function readNodeFacts(node: LockNode): Promise<NodeFacts> {
  if (node.topology === 'cluster') {
    const masters = node.servers();
    if (masters.length === 0) throw new Error('the cluster client knows no masters yet');
    return {
      masters: await Promise.all(
        masters.map(async (server) => ({
          label: serverLabel(server),
          facts: await readServerFacts(server),
        })),
      ),
    };
  }
  const client = node.client as Redis;
  const facts = await readServerFacts(client);
  return node.topology === 'sentinel' ? { ...facts, sentinel: client.options.name } : facts;
}

async function readServerFacts(server: Redis): Promise<ServerFacts> {
  const info = parseInfo(String(await server.info('all')));
  const appendfsync = await server
    .config('GET', 'appendfsync')
    .then((reply) => (Array.isArray(reply) ? (reply[1] as string | undefined) : undefined))
    .catch(() => undefined);
  const aof = info.get('aof_enabled');
  return {
    runId: info.get('run_id'),
    role: info.get('role'),
    replicas: Number(info.get('connected_slaves') ?? 0),
    aofEnabled: aof === undefined ? undefined : aof === '1',
    appendfsync,
    maxmemory: Number(info.get('maxmemory') ?? 0),
    maxmemoryPolicy: info.get('maxmemory_policy'),
    clusterEnabled: info.get('cluster_enabled') === '1',
  };
}

/**
 * What a failover does to a node with replicas that something promotes
 * (Sentinel, Redis Cluster), and what to do about it.
 */
function failoverRisk(subject: string, fencing: boolean, fenceCounterTtl: number): string {
  const lost = fencing
    ? 'the latest lock keys (two holders at once) and fence counter increments (tokens can repeat)'
    : 'the latest lock keys (two holders at once)';
  const advice = !fencing
    ? ''
    : fenceCounterTtl > 0
      ? '; after a failover, delete its fence counters so that they restart from the clock (docs/topologies.md)'
      : ', or set fenceCounterTtl > 0 so that counters the new master lacks restart from the clock, not from 1';
  return `${subject}: replication is asynchronous, so a failover can lose ${lost}. Use independent nodes without failover for locks that must never overlap${advice}.`;
}

/**
 * The risks to safety found in the nodes' set-up, each a sentence saying what
 * to change. `facts[i]` is undefined for a node that could not be read.
 * `fenceCounterTtl` (default: the engine's default) shapes the advice on failover.
 */
export function findRisks(
  labels: readonly string[],
  facts: readonly (NodeFacts | undefined)[],
  fencing: boolean,
  fenceCounterTtl: number = LOCK_DEFAULTS.fenceCounterTtl,
): string[] {
  const risks: string[] = [];
  const count = labels.length;
  if (count > 1 && count % 2 === 0) {
    risks.push(
      `${count} nodes tolerate no more failures than ${count - 1}: a quorum needs ${count / 2 + 1}. Use an odd number of nodes.`,
    );
  }
  /** First server seen per run id: its label, and how a message names it. */
  const seen = new Map<string, { label: string; name: string }>();
  const checkServer = (label: string, name: string, f: ServerFacts, failover: boolean) => {
    if (f.runId) {
      const first = seen.get(f.runId);
      if (!first) {
        seen.set(f.runId, { label, name });
      } else if (first.name === `node ${first.label}` && name === `node ${label}`) {
        risks.push(
          `nodes ${first.label} and ${label} are the same Redis server; list independent servers, each once.`,
        );
      } else {
        risks.push(
          `${first.name} and ${name} are the same Redis server; list independent servers, each once.`,
        );
      }
    }
    if (f.role && f.role !== 'master') {
      risks.push(`${name} is a replica (read-only); list the primary servers only.`);
    } else if (failover && f.replicas > 0) {
      risks.push(
        `${name} has ${f.replicas} replica(s): a failover to one can lose recent lock keys${fencing ? ' and fence counters' : ''}. Use independent nodes without failover.`,
      );
    }
    checkPolicies(name, f);
  };
  const checkPolicies = (node: string, f: ServerFacts) => {
    if (f.maxmemoryPolicy && f.maxmemoryPolicy !== 'noeviction') {
      risks.push(
        `${node} has maxmemory-policy ${f.maxmemoryPolicy}${f.maxmemory > 0 ? '' : ' (inactive while maxmemory is 0)'}: ` +
          'under memory pressure it may evict lock keys. Set maxmemory-policy noeviction.',
      );
    }
    // What a restart that loses data does to the fence counters, for the options in use.
    const counters = !fencing
      ? ''
      : fenceCounterTtl > 0
        ? ' (fence counters it lost restart from the clock, so tokens keep rising)'
        : ' and its fence counters (which restart from 1, so tokens can repeat until reseedFences() runs)';
    if (f.aofEnabled === false) {
      risks.push(
        `${node} has appendonly off: a restart empties it, so a lock that stood on it and on no more than a quorum ` +
          `can be granted to a second holder${counters}. Set appendonly yes and appendfsync always.`,
      );
    } else if (f.appendfsync && f.appendfsync !== 'always') {
      risks.push(
        `${node} has appendfsync ${f.appendfsync}: a crash can lose the last lock keys it granted${counters}. Set appendfsync always.`,
      );
    }
  };
  facts.forEach((f, i) => {
    if (!f) return;
    const node = `node ${labels[i]}`;
    if ('masters' in f) {
      for (const m of f.masters)
        checkServer(m.label, `master ${m.label} of ${node}`, m.facts, false);
      const replicas = f.masters.reduce((sum, m) => sum + m.facts.replicas, 0);
      if (replicas > 0) {
        risks.push(
          failoverRisk(
            `${node} is a Redis Cluster with ${replicas} replica(s) of its masters`,
            fencing,
            fenceCounterTtl,
          ),
        );
      }
      return;
    }
    checkServer(labels[i], node, f, f.sentinel === undefined);
    if (f.sentinel !== undefined) {
      risks.push(
        failoverRisk(
          `${node} is a master that Sentinel fails over ('${f.sentinel}', ${f.replicas} replica(s))`,
          fencing,
          fenceCounterTtl,
        ),
      );
    }
    if (f.clusterEnabled) {
      risks.push(
        `${node} is a member of a Redis Cluster and refuses keys of the other members' slots (MOVED). ` +
          `Give the whole cluster as one node: { cluster: ['redis://${labels[i]}'] }.`,
      );
    }
  });
  return risks;
}

/**
 * Reads every reachable node and reports the risks: warnings, or an error
 * when strict. Unreachable nodes are warned about; strict refuses to start
 * only when fewer than a quorum are reachable, since a node that is down for
 * a moment is what the quorum is for.
 */
export async function checkNodes(
  nodes: readonly LockNode[],
  ready: readonly boolean[],
  quorum: number,
  options: ResolvedEngineOptions,
): Promise<void> {
  const warnings: string[] = [];
  const refusals: string[] = [];
  const down = nodes.filter((_, i) => !ready[i]);
  if (down.length > 0) {
    const belowQuorum = nodes.length - down.length < quorum;
    (belowQuorum ? refusals : warnings).push(
      `${down.length} of ${nodes.length} node(s) unreachable at start-up (` +
        down
          .map((n) => `${n.label}${n.connectionError ? `: ${n.connectionError.message}` : ''}`)
          .join('; ') +
        ')' +
        (belowQuorum
          ? `: fewer than the quorum of ${quorum}, so no lock can be granted until they return.`
          : '.'),
    );
  }
  if (options.checkNodes) {
    const facts = await readFactsOf(nodes, ready, (node, error) =>
      // Strict mode cannot vouch for a node it could not read.
      refusals.push(
        `could not check the set-up of node ${node.label} (${error.message}); allow INFO and CONFIG GET to its user, or set checkNodes: false.`,
      ),
    );
    // CONFIG is often disabled on managed services: say what went unchecked, without refusing.
    facts.forEach((f, i) => {
      const servers = !f ? [] : 'masters' in f ? f.masters.map((m) => m.facts) : [f];
      if (
        servers.some((server) => server.aofEnabled !== false && server.appendfsync === undefined)
      ) {
        warnings.push(
          `could not read appendfsync on node ${nodes[i].label} (CONFIG GET is not allowed); make sure it is 'always', or a crash can lose the lock keys it granted last${options.fencing ? ' and its fence counters' : ''}.`,
        );
      }
    });
    refusals.push(
      ...findRisks(
        nodes.map((n) => n.label),
        facts,
        options.fencing,
        options.fenceCounterTtl,
      ),
    );
  }
  if (options.strict && refusals.length > 0) {
    throw new LockConfigurationError(
      `Refusing to start (strict mode): ${[...refusals, ...warnings].join(' ')} Fix the nodes, or set strict: false to start with warnings.`,
    );
  }
  for (const problem of [...warnings, ...refusals]) options.logger.warn(problem);
}

/**
 * The facts of every node marked up in `up` (undefined for the others, and
 * for a node that could not be read, which `unreadable` is told about), each
 * read bounded by `timeoutMs` when given.
 */
function readFactsOf(
  nodes: readonly LockNode[],
  up: readonly boolean[],
  unreadable: (node: LockNode, error: Error) => void,
  timeoutMs?: number,
): Promise<(NodeFacts | undefined)[]> {
  return Promise.all(
    nodes.map((node, i) => {
      if (!up[i]) return undefined;
      const read = readNodeFacts(node);
      return (timeoutMs === undefined ? read : bounded(read, timeoutMs)).catch((error: Error) => {
        unreadable(node, error);
        return undefined;
      });
    }),
  );
}

/**
 * The risks in the set-up of the nodes marked up in `up` (what the engine
 * checks on connect), read now for an operator: the sentences of
 * {@link findRisks}, then one per node that could not be read. Each node's
 * reads are bounded by `timeoutMs`.
 */
export async function collectRisks(
  nodes: readonly LockNode[],
  up: readonly boolean[],
  options: Pick<ResolvedEngineOptions, 'fencing' | 'fenceCounterTtl'>,
  timeoutMs: number,
): Promise<string[]> {
  const unreadable: string[] = [];
  const facts = await readFactsOf(
    nodes,
    up,
    (node, error) =>
      unreadable.push(
        `could not check the set-up of node ${node.label} (${error.message}); allow INFO and CONFIG GET to its user.`,
      ),
    timeoutMs,
  );
  const risks = findRisks(
    nodes.map((n) => n.label),
    facts,
    options.fencing,
    options.fenceCounterTtl,
  );
  return [...risks, ...unreadable];
}
