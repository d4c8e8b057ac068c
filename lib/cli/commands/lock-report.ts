/**
 * How inspect, release and list show a lock: the verdict in a sentence, the
 * table of what each node holds, and the same as JSON.
 */
import {
  explainNodeError,
  type JudgedLock,
  type LockEngine,
  type LockVerdict,
  type NodeLockState,
} from '../../engine/internal.js';
import { plural, type Cell, type Column, type Terminal, type Tone } from '../cli-output.js';
import { formatLease } from '../durations.js';

/** A remaining lease in ms: null when there is no key. */
function lease(node: NodeLockState): number | null {
  return node.ttl === undefined || node.ttl === -2 ? null : node.ttl;
}

/** The error of the engine's `index`th node, said as an operator needs it. */
export function nodeError(
  engine: LockEngine,
  index: number,
  error: string | undefined,
): string | undefined {
  return explainNodeError(engine.nodes[index], error);
}

export function inspectionJson(engine: LockEngine, judged: JudgedLock) {
  const { inspection } = judged;
  return {
    resource: inspection.resource,
    verdict: judged.verdict,
    held: inspection.held,
    holder: inspection.holder ?? null,
    lease: inspection.ttl ?? null,
    fence: inspection.fence ?? null,
    quorum: {
      required: engine.quorum,
      nodes: engine.nodes.length,
      answered: judged.answered,
      holding: judged.holding,
    },
    nodes: inspection.nodes.map((node, i) => ({
      node: node.node,
      answered: node.holder !== undefined,
      holder: node.holder ?? null,
      lease: lease(node),
      fence: node.fence ?? null,
      error: nodeError(engine, i, node.error) ?? null,
    })),
  };
}

/** How a verdict reads: held good, free dim, unknown bad. */
export function verdictTone(verdict: LockVerdict): Tone {
  return verdict === 'held' ? 'good' : verdict === 'free' ? 'dim' : 'bad';
}

export function verdictCell(verdict: LockVerdict): Cell {
  return { text: verdict, tone: verdictTone(verdict) };
}

/** One sentence on what the nodes say about the resource. */
export function summary(engine: LockEngine, term: Terminal, judged: JudgedLock): string {
  const { inspection, verdict, answered, holding, keyed } = judged;
  const total = engine.nodes.length;
  const fence = inspection.fence === undefined ? '' : `; last fencing token ${inspection.fence}`;
  const name = term.paint(inspection.resource, 'bold');
  if (verdict === 'held') {
    return (
      `${name} is ${term.paint('held', 'good')} by ${inspection.holder} on ${holding} of ${plural(total, 'node')} ` +
      `(quorum ${engine.quorum}); lease ends in ${formatLease(inspection.ttl)}${fence}.`
    );
  }
  if (verdict === 'unknown') {
    return (
      `${name} is ${term.paint('unknown', 'bad')}: ${answered} of ${plural(total, 'node')} answered` +
      (keyed > 0 ? ` (${keyed} with a lock key)` : '') +
      `, too few to tell with a quorum of ${engine.quorum}${fence}.`
    );
  }
  const stale =
    keyed > 0
      ? `; ${plural(keyed, 'node')} still ${keyed === 1 ? 'has' : 'have'} the key of a lock ` +
        'short of a quorum, which expires with its lease'
      : '';
  return `${name} is ${term.paint('free', 'dim')} (${answered} of ${plural(total, 'node')} answered)${fence}${stale}.`;
}

/** What each node holds for the resource, one row per node. */
export function nodeTable(engine: LockEngine, term: Terminal, judged: JudgedLock): void {
  const { inspection } = judged;
  const notes = inspection.nodes.map((node, i) => {
    const error = nodeError(engine, i, node.error);
    if (error) return { text: error, tone: 'bad' } as const;
    if (judged.verdict === 'held' && node.holder && node.holder !== inspection.holder)
      return { text: 'another value', tone: 'warn' } as const;
    return '';
  });
  const columns: Column[] = [
    { title: 'NODE' },
    { title: 'HOLDER' },
    { title: 'LEASE', align: 'right' },
    { title: 'FENCE', align: 'right' },
  ];
  if (notes.some((note) => note !== '')) columns.push({ title: 'NOTE' });
  term.table(
    columns,
    inspection.nodes.map((node, i): Cell[] => [
      node.node,
      node.holder === undefined
        ? { text: '(no answer)', tone: 'bad' }
        : node.holder === null
          ? { text: '(free)', tone: 'dim' }
          : node.holder,
      formatLease(lease(node)),
      node.fence === null || node.fence === undefined ? '-' : String(node.fence),
      notes[i],
    ]),
  );
}
