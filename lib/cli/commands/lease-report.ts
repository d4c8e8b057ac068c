/**
 * How inspect and list show a read-write lock or a semaphore: the verdict in
 * a sentence, what each node holds (one row per holding), the waiters in
 * line, and the same as JSON.
 */
import type {
  LeaseHolding,
  LeaseInspection,
  LockEngine,
  NodeLeaseState,
  ReadWriteInspection,
  SemaphoreInspection,
} from '../../engine/internal.js';
import { plural, type Cell, type Column, type Terminal } from '../cli-output.js';
import { formatDuration, formatLease } from '../durations.js';
import { nodeError, verdictCell, verdictTone } from './lock-report.js';

type Inspection = ReadWriteInspection | SemaphoreInspection;

const TITLES: Record<Inspection['kind'], string> = {
  'read-write': 'Read-write lock',
  semaphore: 'Semaphore',
};

/** The time a quorum still holds the holding that ends first. */
function firstLease(inspection: LeaseInspection): number | undefined {
  const leases = inspection.holders.map((holding) => holding.lease);
  return leases.length > 0 ? Math.min(...leases) : undefined;
}

/** `3/3`: on how many nodes each holding stands (the fewest), or `-` when none is held. */
function nodesCell(engine: LockEngine, inspection: LeaseInspection): string {
  const counts = inspection.holders.map((holding) => holding.nodes);
  return counts.length > 0 ? `${Math.min(...counts)}/${engine.nodes.length}` : '-';
}

/** Who holds it, in a few words: a holder's value, `3 readers`, `2 permits`. */
export function holdersText(inspection: Inspection): string {
  const { holders } = inspection;
  if (holders.length === 0) return '-';
  if (inspection.kind === 'semaphore') return plural(holders.length, 'permit');
  return holders.length === 1
    ? `${holders[0].value} (${holders[0].mode})`
    : plural(holders.length, holders[0].mode === 'write' ? 'writer' : 'reader');
}

/** A list row's cells after the resource and its kind: state, holder, nodes, lease, fence. */
export function listCells(engine: LockEngine, inspection: Inspection): Cell[] {
  return [
    verdictCell(inspection.verdict),
    holdersText(inspection),
    nodesCell(engine, inspection),
    formatLease(firstLease(inspection)),
    inspection.fence === undefined ? '-' : String(inspection.fence),
  ];
}

/** What the line adds to a sentence: `no one waits`, `2 waiters in line`. */
function lineText(inspection: LeaseInspection): string {
  return inspection.line.length === 0
    ? 'no one waits'
    : `${plural(inspection.line.length, 'waiter')} in line`;
}

/** One sentence on what the nodes say about a read-write lock or a semaphore. */
export function leaseSummary(engine: LockEngine, term: Terminal, inspection: Inspection): string {
  const { verdict, holders, uncertain, stale, answered } = inspection;
  const total = engine.nodes.length;
  const name = `${TITLES[inspection.kind]} ${term.paint(inspection.resource, 'bold')}`;
  const fence = inspection.fence === undefined ? '' : `; last fencing token ${inspection.fence}`;
  const state = term.paint(verdict, verdictTone(verdict));
  if (verdict === 'unknown') {
    const seen = uncertain.length + stale.length;
    return (
      `${name}: ${state}: ${answered} of ${plural(total, 'node')} answered` +
      (seen > 0 ? ` (${plural(seen, 'holding')} there)` : '') +
      `, too few to tell with a quorum of ${engine.quorum}; ${lineText(inspection)}${fence}.`
    );
  }
  const parts: string[] = [];
  if (verdict === 'held') {
    const counts = holders.map((holding) => holding.nodes);
    const where =
      `${holders.length > 1 ? 'each ' : ''}on ${Math.min(...counts) < Math.max(...counts) ? 'at least ' : ''}` +
      `${Math.min(...counts)} of ${plural(total, 'node')}, quorum ${engine.quorum}`;
    const what =
      inspection.kind === 'read-write'
        ? `for ${inspection.mode === 'write' ? 'writing' : 'reading'} by ${holders.length}`
        : inspection.permits === undefined
          ? `${plural(holders.length, 'permit')}`
          : `${holders.length} of ${plural(inspection.permits, 'permit')}`;
    const lease = formatLease(firstLease(inspection));
    parts.push(
      inspection.kind === 'read-write'
        ? `${name}: ${state} ${what} (${where})`
        : `${name}: ${what} ${state} (${where})`,
      holders.length > 1 ? `the first lease ends in ${lease}` : `lease ends in ${lease}`,
    );
    if (uncertain.length > 0) {
      parts.push(
        `${plural(uncertain.length, 'more holding')} may stand, too few nodes answered to tell`,
      );
    }
  } else {
    parts.push(`${name}: ${state} (${answered} of ${plural(total, 'node')} answered)`);
  }
  if (stale.length > 0) {
    parts.push(
      `${plural(stale.length, 'holding')} short of a quorum ${stale.length === 1 ? 'expires' : 'expire'} with ${stale.length === 1 ? 'its' : 'their'} lease`,
    );
  }
  parts.push(lineText(inspection));
  return `${parts.join('; ')}${fence}.`;
}

/** A holding's note in the node table: empty when it stands on a quorum. */
function holdingNote(inspection: LeaseInspection, holding: { value: string; slot?: number }): Cell {
  const same = (h: LeaseHolding) => h.value === holding.value && h.slot === holding.slot;
  if (inspection.holders.some(same)) return '';
  return { text: 'short of a quorum', tone: 'warn' };
}

/** What each node holds: one row per holding, the node named on its first. */
export function leaseNodeTable(engine: LockEngine, term: Terminal, inspection: Inspection): void {
  const semaphore = inspection.kind === 'semaphore';
  const permits = semaphore ? inspection.permits : undefined;
  const inUse = (count: number) => (permits === undefined ? String(count) : `${count}/${permits}`);
  // A read-write lock's rows have MODE where a semaphore's have IN USE and SLOT.
  const row = (node: string, inUseCell: string, slot: string, holder: Cell, mode: string) =>
    semaphore ? [node, inUseCell, slot, holder] : [node, holder, mode];
  const rows = inspection.nodes.flatMap((node, i): { cells: Cell[]; note: Cell }[] => {
    const blank = ['-', '-'];
    if (node.holders === undefined) {
      const error = nodeError(engine, i, node.error) ?? '';
      return [
        {
          cells: [...row(node.node, '-', '-', { text: '(no answer)', tone: 'bad' }, '-'), ...blank],
          note: error === '' ? '' : { text: error, tone: 'bad' },
        },
      ];
    }
    if (node.holders.length === 0) {
      return [
        {
          cells: [...row(node.node, inUse(0), '-', { text: '(free)', tone: 'dim' }, '-'), ...blank],
          note: '',
        },
      ];
    }
    return node.holders.map((holder, k) => ({
      cells: [
        ...row(
          k === 0 ? node.node : '',
          k === 0 ? inUse(node.holders!.length) : '',
          String(holder.slot),
          holder.value,
          holder.mode ?? '-',
        ),
        formatLease(holder.lease),
        String(holder.token),
      ],
      note: holdingNote(inspection, holder),
    }));
  });
  const columns: Column[] = semaphore
    ? [
        { title: 'NODE' },
        { title: 'IN USE', align: 'right' },
        { title: 'SLOT', align: 'right' },
        { title: 'HOLDER' },
      ]
    : [{ title: 'NODE' }, { title: 'HOLDER' }, { title: 'MODE' }];
  columns.push({ title: 'LEASE', align: 'right' }, { title: 'TOKEN', align: 'right' });
  const notes = rows.some((r) => r.note !== '');
  if (notes) columns.push({ title: 'NOTE' });
  term.table(
    columns,
    rows.map((r) => (notes ? [...r.cells, r.note] : r.cells)),
  );
}

/** The waiters in each node's line, first come first; nothing when no node has one. */
export function lineTable(term: Terminal, inspection: Inspection): void {
  const withMode = inspection.kind === 'read-write';
  const rows = inspection.nodes.flatMap((node) =>
    (node.line ?? []).map((waiter, k): Cell[] => [
      k === 0 ? node.node : '',
      waiter.waiter,
      ...(withMode ? [waiter.mode ?? '-'] : []),
      formatDuration(waiter.waited),
      formatDuration(waiter.place),
    ]),
  );
  if (rows.length === 0) return;
  term.table(
    [
      { title: 'NODE' },
      { title: 'WAITER' },
      ...(withMode ? [{ title: 'MODE' }] : []),
      { title: 'WAITED', align: 'right' },
      { title: 'PLACE', align: 'right' },
    ],
    rows,
  );
}

/** The sentence, the node table and the line: a section of `inspect`. */
export function leaseSection(engine: LockEngine, term: Terminal, inspection: Inspection): void {
  term.print(leaseSummary(engine, term, inspection));
  term.print();
  leaseNodeTable(engine, term, inspection);
  if (inspection.line.length > 0) {
    term.print();
    lineTable(term, inspection);
  }
}

/** The holdings as JSON: a semaphore's with their slot, a read-write lock's with their mode. */
function holdingsJson(holdings: readonly LeaseHolding[]) {
  return holdings.map(({ value, mode, slot, nodes, lease, token }) => ({
    ...(slot === undefined ? {} : { slot }),
    value,
    ...(mode === undefined ? {} : { mode }),
    nodes,
    lease,
    token,
  }));
}

function nodeJson(engine: LockEngine, node: NodeLeaseState, i: number) {
  return {
    node: node.node,
    answered: node.holders !== undefined,
    holders: node.holders ?? null,
    line: node.line ?? null,
    fence: node.fence ?? null,
    error: nodeError(engine, i, node.error) ?? null,
  };
}

/** A read-write lock or a semaphore as `inspect --json` gives it: the list's facts and every node's. */
export function leaseJson(engine: LockEngine, inspection: Inspection) {
  return {
    ...leaseListJson(engine, inspection),
    uncertain: holdingsJson(inspection.uncertain),
    stale: holdingsJson(inspection.stale),
    line: inspection.line,
    quorum: {
      required: engine.quorum,
      nodes: engine.nodes.length,
      answered: inspection.answered,
    },
    nodes: inspection.nodes.map((node, i) => nodeJson(engine, node, i)),
  };
}

/** A read-write lock or a semaphore as `list --json` gives it. */
export function leaseListJson(engine: LockEngine, inspection: Inspection) {
  return {
    kind: inspection.kind,
    resource: inspection.resource,
    verdict: inspection.verdict,
    ...(inspection.kind === 'read-write'
      ? { mode: inspection.mode ?? null }
      : { permits: inspection.permits ?? null, inUse: inspection.holders.length }),
    holders: holdingsJson(inspection.holders),
    waiting: inspection.line.length,
    lease: firstLease(inspection) ?? null,
    fence: inspection.fence ?? null,
  };
}
