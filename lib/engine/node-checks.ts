import { LockConfigurationError } from './lock-errors.js';
import type { LockNode } from './lock-node.js';
import type { ResolvedEngineOptions } from './lock-options.js';

/** What the checks read off one node. */
export interface NodeFacts {
  readonly runId: string | undefined;
  readonly role: string | undefined;
  readonly replicas: number;
  readonly aofEnabled: boolean | undefined;
  /** `undefined` where CONFIG is disabled (managed Redis services). */
  readonly appendfsync: string | undefined;
  readonly maxmemory: number;
  readonly maxmemoryPolicy: string | undefined;
}

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

export async function readNodeFacts(node: LockNode): Promise<NodeFacts> {
  const info = parseInfo(String(await node.client.info('all')));
  const appendfsync = await node.client
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
  };
}

/**
 * The risks to safety found in the nodes' set-up, each a sentence saying what
 * to change. `facts[i]` is undefined for a node that could not be read.
 */
export function findRisks(
  labels: readonly string[],
  facts: readonly (NodeFacts | undefined)[],
  fencing: boolean,
): string[] {
  const risks: string[] = [];
  const count = labels.length;
  if (count > 1 && count % 2 === 0) {
    risks.push(
      `${count} nodes tolerate no more failures than ${count - 1}: a quorum needs ${count / 2 + 1}. Use an odd number of nodes.`,
    );
  }
  const seen = new Map<string, number>();
  facts.forEach((f, i) => {
    if (!f) return;
    const node = `node ${labels[i]}`;
    if (f.runId) {
      const first = seen.get(f.runId);
      if (first !== undefined) {
        risks.push(
          `nodes ${labels[first]} and ${labels[i]} are the same Redis server; list independent servers, each once.`,
        );
      } else {
        seen.set(f.runId, i);
      }
    }
    if (f.role && f.role !== 'master') {
      risks.push(`${node} is a replica (read-only); list the primary servers only.`);
    } else if (f.replicas > 0) {
      risks.push(
        `${node} has ${f.replicas} replica(s): a failover to one can lose recent lock keys${fencing ? ' and fence counters' : ''}. Use independent nodes without failover.`,
      );
    }
    if (f.maxmemoryPolicy && f.maxmemoryPolicy !== 'noeviction') {
      risks.push(
        `${node} has maxmemory-policy ${f.maxmemoryPolicy}${f.maxmemory > 0 ? '' : ' (inactive while maxmemory is 0)'}: ` +
          'under memory pressure it may evict lock keys. Set maxmemory-policy noeviction.',
      );
    }
    if (fencing && f.aofEnabled === false) {
      risks.push(
        `${node} has appendonly off: a restart loses its fence counters and tokens can repeat. Set appendonly yes and appendfsync always.`,
      );
    } else if (fencing && f.appendfsync && f.appendfsync !== 'always') {
      risks.push(
        `${node} has appendfsync ${f.appendfsync}: a crash can lose the last counter increments and tokens can repeat. Set appendfsync always.`,
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
    const facts = await Promise.all(
      nodes.map((node, i) =>
        ready[i]
          ? readNodeFacts(node).catch((error: Error) => {
              warnings.push(
                `could not check the set-up of node ${node.label} (${error.message}); allow INFO and CONFIG GET to its user, or set checkNodes: false.`,
              );
              return undefined;
            })
          : undefined,
      ),
    );
    refusals.push(
      ...findRisks(
        nodes.map((n) => n.label),
        facts,
        options.fencing,
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
