import type { LockNode } from '../lock-node.js';
import { bounded } from '../time-bound.js';
import { lockKeyPattern, scanKeys } from './key-scan.js';
import {
  byMode,
  compareText,
  judgeReadWrite,
  judgeSemaphore,
  type NodeLeaseHolder,
  type NodeLeaseState,
  type NodeLineWaiter,
  type ReadWriteInspection,
  type SemaphoreInspection,
} from './lease-verdict.js';

/**
 * Reading the read-write lock and the semaphore of a name off the nodes, for
 * operators: each node's live holders and line, by that node's clock, judged
 * in lease-verdict.ts. The layout is the scripts' (rw-lua.ts,
 * semaphore-lua.ts): `<lock key>:rw` holds value -> 'mode expiry token' and
 * `<lock key>:rw:q` waiter -> 'arrival expiry mode'; `<lock key>:sem` holds
 * slot -> 'value expiry token' and `<lock key>:sem:q` waiter -> 'arrival
 * expiry'. Entries past their expiry wait for the next script to prune them;
 * they are left out here as the scripts leave them out.
 */

/** A name's read-write lock and semaphore, as the nodes have them. */
export interface LeaseInspections {
  readonly readWrite: ReadWriteInspection;
  readonly semaphore: SemaphoreInspection;
}

/** The read-write locks and semaphores held (or maybe held) among the names matching a pattern. */
export interface LeaseListing {
  readonly readWrite: readonly ReadWriteInspection[];
  readonly semaphores: readonly SemaphoreInspection[];
  /** True when more matched than the limit, and some were left out. */
  readonly limitReached: boolean;
}

/** How many names a listing inspects at once. */
const INSPECT_WIDTH = 50;

/** The key suffixes a listing finds names by, and what each belongs to. */
const SUFFIXES = [
  ['}:rw', 'read-write'],
  ['}:rw:q', 'read-write'],
  ['}:sem', 'semaphore'],
  ['}:sem:q', 'semaphore'],
] as const;

/**
 * The read-write lock and the semaphore of `resource` on every node, each
 * read bounded by `timeoutMs` (a node that fails or does not answer is
 * reported as such), judged for a quorum of `quorum`; `permits` is the
 * semaphore's N when the caller knows it.
 */
export async function inspectLeases(
  nodes: readonly LockNode[],
  keyPrefix: string,
  resource: string,
  quorum: number,
  timeoutMs: number,
  permits?: number,
): Promise<LeaseInspections> {
  const lockKey = `${keyPrefix}{${resource}}`;
  const reads = await Promise.all(
    nodes.map((node) => readNode(node, lockKey, `${keyPrefix}fence`, timeoutMs)),
  );
  return {
    readWrite: judgeReadWrite(
      resource,
      reads.map((read) => read.readWrite),
      quorum,
    ),
    semaphore: judgeSemaphore(
      resource,
      reads.map((read) => read.semaphore),
      quorum,
      permits,
    ),
  };
}

/**
 * The read-write locks and semaphores whose name matches `pattern` (a Redis
 * glob, as for locks) that are held, or may be held where too few nodes
 * answered to tell, in name order, at most `limit` of them together. Nodes
 * that do not answer are left out of the search: a holding stands on a
 * quorum, so any `n - quorum + 1` nodes that answer find every one.
 */
export async function listLeases(
  nodes: readonly LockNode[],
  keyPrefix: string,
  pattern: string,
  quorum: number,
  timeoutMs: number,
  limit = 1000,
): Promise<LeaseListing> {
  const match = `${lockKeyPattern(keyPrefix, pattern)}:[rs][we]*`;
  const names = new Set<string>();
  await Promise.allSettled(
    nodes.map((node) =>
      Promise.all(
        node.servers().map(async (server) => {
          for await (const key of scanKeys(server, match, timeoutMs)) {
            const name = nameOf(key, keyPrefix);
            if (name !== undefined) names.add(name);
          }
        }),
      ),
    ),
  );
  const sorted = [...names].sort();
  const readWrite: ReadWriteInspection[] = [];
  const semaphores: SemaphoreInspection[] = [];
  const found: (ReadWriteInspection | SemaphoreInspection)[] = [];
  for (let i = 0; i < sorted.length && found.length <= limit; i += INSPECT_WIDTH) {
    const batch = await Promise.all(
      sorted
        .slice(i, i + INSPECT_WIDTH)
        .map((name) => inspectLeases(nodes, keyPrefix, name, quorum, timeoutMs)),
    );
    for (const inspections of batch) {
      for (const inspection of [inspections.readWrite, inspections.semaphore]) {
        if (inspection.holders.length > 0 || inspection.uncertain.length > 0)
          found.push(inspection);
      }
    }
  }
  for (const inspection of found.slice(0, limit)) {
    if (inspection.kind === 'read-write') readWrite.push(inspection);
    else semaphores.push(inspection);
  }
  return { readWrite, semaphores, limitReached: found.length > limit };
}

/** The name whose read-write lock or semaphore `key` belongs to, or undefined for other keys. */
function nameOf(key: string, keyPrefix: string): string | undefined {
  const start = `${keyPrefix}{`;
  if (!key.startsWith(start)) return undefined;
  const rest = key.slice(start.length);
  const suffix = SUFFIXES.find(([ending]) => rest.endsWith(ending));
  return suffix && rest.length > suffix[0].length ? rest.slice(0, -suffix[0].length) : undefined;
}

/** One node's answer, read at once (one transaction, so that all of it is of one moment). */
async function readNode(
  node: LockNode,
  lockKey: string,
  nodeCounterKey: string,
  timeoutMs: number,
): Promise<{ readWrite: NodeLeaseState; semaphore: NodeLeaseState }> {
  const rw = `${lockKey}:rw`;
  const sem = `${lockKey}:sem`;
  try {
    const reads = node.client
      .multi()
      .time()
      .hgetall(rw)
      .hgetall(`${rw}:q`)
      .hgetall(sem)
      .hgetall(`${sem}:q`)
      .get(`${lockKey}:fence`);
    // The node's own counter too (fenceCounter 'node'); a cluster counts per resource only.
    if (node.keepsNodeCounter) reads.get(nodeCounterKey);
    const replies = (await bounded(reads.exec(), timeoutMs)) ?? [];
    const [time, rwHolders, rwLine, semHolders, semLine, ...counters] = replies.map(
      ([error, value]) => {
        if (error) throw error;
        return value;
      },
    ) as [
      [string, string],
      Record<string, string>,
      Record<string, string>,
      Record<string, string>,
      Record<string, string>,
      ...(string | null)[],
    ];
    const clock = Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000);
    const known = counters.filter((c): c is string => c !== null).map(Number);
    const common = { node: node.label, fence: known.length > 0 ? Math.max(...known) : null };
    return {
      readWrite: {
        ...common,
        holders: readWriteHolders(rwHolders, clock),
        line: places(rwLine, clock, true),
      },
      semaphore: {
        ...common,
        holders: semaphoreHolders(semHolders, clock),
        line: places(semLine, clock, false),
      },
    };
  } catch (error) {
    const failed: NodeLeaseState = {
      node: node.label,
      holders: undefined,
      line: undefined,
      fence: undefined,
      error: (error as Error).message,
    };
    return { readWrite: failed, semaphore: failed };
  }
}

/** A read-write lock's live holders (value -> 'mode expiry token'), by value. */
function readWriteHolders(hash: Record<string, string>, clock: number): NodeLeaseHolder[] {
  const live: NodeLeaseHolder[] = [];
  for (const [value, entry] of Object.entries(hash)) {
    const parts = /^([A-Za-z]) (\d+) (\d+)$/.exec(entry);
    if (!parts || Number(parts[2]) <= clock) continue;
    live.push({
      value,
      mode: parts[1] === 'w' ? 'write' : 'read',
      lease: Number(parts[2]) - clock,
      token: Number(parts[3]),
    });
  }
  return live.sort(byMode);
}

/** A semaphore's live permits (slot -> 'value expiry token'). */
function semaphoreHolders(hash: Record<string, string>, clock: number): NodeLeaseHolder[] {
  const live: NodeLeaseHolder[] = [];
  for (const [slot, entry] of Object.entries(hash)) {
    const parts = /^(\S+) (\d+) (\d+)$/.exec(entry);
    if (!parts || !/^\d+$/.test(slot) || Number(parts[2]) <= clock) continue;
    live.push({
      value: parts[1],
      slot: Number(slot),
      lease: Number(parts[2]) - clock,
      token: Number(parts[3]),
    });
  }
  return live.sort((a, b) => a.slot! - b.slot!);
}

/** A line's live places (waiter -> 'arrival expiry[ mode]'), first come first (ties: the lower id). */
function places(hash: Record<string, string>, clock: number, withMode: boolean): NodeLineWaiter[] {
  const live: NodeLineWaiter[] = [];
  const shape = withMode ? /^(\S+) (\d+) ([A-Za-z])$/ : /^(\S+) (\d+)$/;
  for (const [waiter, entry] of Object.entries(hash)) {
    const parts = shape.exec(entry);
    const arrival = Number(parts?.[1]);
    if (!parts || !Number.isFinite(arrival) || Number(parts[2]) <= clock) continue;
    live.push({
      waiter,
      arrival,
      ...(withMode ? { mode: parts[3] === 'w' ? ('write' as const) : ('read' as const) } : {}),
      waited: Math.max(0, Math.round(clock - arrival)),
      place: Number(parts[2]) - clock,
    });
  }
  return live.sort((a, b) => a.arrival - b.arrival || compareText(a.waiter, b.waiter));
}
