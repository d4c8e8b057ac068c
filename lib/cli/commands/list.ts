/**
 * `list [pattern]`: the locks whose resource matches a pattern, each
 * inspected, and the read-write locks and semaphores held among those names.
 */
import {
  judgeLock,
  listLeases,
  type JudgedLock,
  type ReadWriteInspection,
  type SemaphoreInspection,
} from '../../engine/internal.js';
import { plural, type Cell, type Column } from '../cli-output.js';
import { formatLease } from '../durations.js';
import { EXIT_FAILED, EXIT_OK } from '../exit-codes.js';
import { READ_TIMEOUT_MS, type CommandContext } from './context.js';
import { leaseListJson, listCells } from './lease-report.js';
import { verdictCell } from './lock-report.js';

/** One listed entry: a lock, or a read-write lock or semaphore, by name. */
type Entry =
  | { readonly kind: 'lock'; readonly resource: string; readonly lock: JudgedLock }
  | {
      readonly kind: 'read-write' | 'semaphore';
      readonly resource: string;
      readonly lease: ReadWriteInspection | SemaphoreInspection;
    };

const KIND_ORDER = ['lock', 'read-write', 'semaphore'];

/** How many resources are inspected at once. */
const INSPECT_WIDTH = 50;

/** Runs `work` over `items`, `width` at a time, keeping their order. */
async function mapBounded<T, R>(
  items: readonly T[],
  width: number,
  work: (item: T) => Promise<R>,
): Promise<R[]> {
  const results: R[] = [];
  for (let i = 0; i < items.length; i += width) {
    results.push(...(await Promise.all(items.slice(i, i + width).map(work))));
  }
  return results;
}

export async function list({ engine, request, term }: CommandContext): Promise<number> {
  const pattern = request.target ?? '*';
  // The listing skips nodes that do not answer, which is complete for held locks only with a quorum.
  const health = await engine.health();
  const up = health.nodes.filter((n) => n.up).length;
  const resources = await engine.list(pattern, request.limit);
  const judged = await mapBounded(resources, INSPECT_WIDTH, async (resource) =>
    judgeLock(await engine.inspect(resource), engine.quorum),
  );
  const leases = await listLeases(
    engine.nodes,
    engine.options.keyPrefix,
    pattern,
    engine.quorum,
    READ_TIMEOUT_MS,
    request.limit,
  );
  const all: Entry[] = [
    ...judged.map((lock): Entry => ({ kind: 'lock', resource: lock.inspection.resource, lock })),
    ...[...leases.readWrite, ...leases.semaphores].map((lease): Entry => ({
      kind: lease.kind,
      resource: lease.resource,
      lease,
    })),
  ].sort(
    (a, b) =>
      (a.resource < b.resource ? -1 : a.resource > b.resource ? 1 : 0) ||
      KIND_ORDER.indexOf(a.kind) - KIND_ORDER.indexOf(b.kind),
  );
  const entries = all.slice(0, request.limit);
  const limitReached =
    resources.length >= request.limit || leases.limitReached || all.length > request.limit;
  const failed = !health.quorum;
  if (request.json) {
    const leasesOf = (kind: Entry['kind']) =>
      entries.flatMap((entry) =>
        entry.kind === kind && entry.kind !== 'lock' ? [leaseListJson(engine, entry.lease)] : [],
      );
    term.print(
      JSON.stringify(
        {
          pattern,
          limit: request.limit,
          limitReached,
          quorum: { required: engine.quorum, nodes: engine.nodes.length, answered: up },
          locks: entries.flatMap((entry) =>
            entry.kind === 'lock'
              ? [
                  {
                    kind: entry.kind,
                    resource: entry.resource,
                    verdict: entry.lock.verdict,
                    holder: entry.lock.inspection.holder ?? null,
                    lease: entry.lock.inspection.ttl ?? null,
                    fence: entry.lock.inspection.fence ?? null,
                    holding: entry.lock.holding,
                  },
                ]
              : [],
          ),
          readWriteLocks: leasesOf('read-write'),
          semaphores: leasesOf('semaphore'),
        },
        null,
        2,
      ),
    );
  } else if (entries.length === 0) {
    term.print(`No locks match '${pattern}'.`);
  } else {
    // The kind is named once there is more than plain locks to tell apart.
    const kinds = entries.some((entry) => entry.kind !== 'lock');
    const columns: Column[] = [
      { title: 'RESOURCE' },
      ...(kinds ? [{ title: 'KIND' }] : []),
      { title: 'STATE' },
      { title: 'HOLDER' },
      { title: 'NODES', align: 'right' },
      { title: 'LEASE', align: 'right' },
      { title: 'FENCE', align: 'right' },
    ];
    term.table(
      columns,
      entries.map((entry): Cell[] => [
        entry.resource,
        ...(kinds ? [entry.kind] : []),
        ...(entry.kind === 'lock'
          ? lockCells(entry.lock, engine.nodes.length)
          : listCells(engine, entry.lease)),
      ]),
    );
    term.print();
    term.print(
      `${plural(entries.length, 'resource')} matching '${pattern}'` +
        (limitReached ? ` (stopped at --limit ${request.limit}; there may be more)` : '') +
        '.',
    );
  }
  if (up < engine.nodes.length) {
    term.note(
      term.paintErr(
        failed
          ? `Only ${up} of ${plural(engine.nodes.length, 'node')} answered, fewer than the quorum of ${engine.quorum}: locks may be missing.`
          : `${engine.nodes.length - up} of ${plural(engine.nodes.length, 'node')} did not answer; with a quorum up, every held lock is listed.`,
        failed ? 'bad' : 'warn',
      ),
    );
  }
  return failed ? EXIT_FAILED : EXIT_OK;
}

/** A lock's cells after its resource (and kind): state, holder, nodes, lease, fence. */
function lockCells({ inspection, verdict, holding }: JudgedLock, nodes: number): Cell[] {
  return [
    verdictCell(verdict),
    inspection.holder ?? '-',
    verdict === 'held' ? `${holding}/${nodes}` : '-',
    formatLease(inspection.ttl),
    inspection.fence === undefined ? '-' : String(inspection.fence),
  ];
}
