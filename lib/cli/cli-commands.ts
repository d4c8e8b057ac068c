/**
 * The five commands. Each reads the nodes through the engine's administration
 * methods, prints a table (or JSON) and returns the exit code: 0 done,
 * 1 failed. Usage mistakes found only once connected throw UsageError (2).
 */
import { LockUnavailableError } from '../engine/lock-errors.js';
import type { LockEngine } from '../engine/lock-engine.js';
import type { LockHealth, LockInspection, NodeLockState } from '../engine/lock-admin.js';
import { findRisks, readNodeFacts, type NodeFacts } from '../engine/node-checks.js';
import { BIN, UsageError, type CommandName, type CommandRequest } from './cli-arguments.js';
import {
  formatDuration,
  formatLatency,
  plural,
  type Cell,
  type Column,
  type Terminal,
} from './cli-output.js';

export interface CommandContext {
  readonly engine: LockEngine;
  readonly request: CommandRequest;
  readonly term: Terminal;
  /** Asks a yes/no question on the terminal; true for yes. */
  readonly confirm: (question: string) => Promise<boolean>;
}

export const EXIT_OK = 0;
export const EXIT_FAILED = 1;
export const EXIT_USAGE = 2;

/** How long a node may take over one of the tool's own reads. */
const READ_TIMEOUT_MS = 2500;

// --- Verdicts -----------------------------------------------------------------

/** held: a quorum holds one value; free: no value can have a quorum; unknown: too few answers to tell. */
export type Verdict = 'held' | 'free' | 'unknown';

interface Judged {
  readonly inspection: LockInspection;
  readonly verdict: Verdict;
  /** Nodes that answered. */
  readonly answered: number;
  /** Nodes holding the verdict's value (0 unless held). */
  readonly holding: number;
  /** Nodes that answered with a lock key of any value. */
  readonly keyed: number;
}

function judge(engine: LockEngine, inspection: LockInspection): Judged {
  const votes = new Map<string, number>();
  let answered = 0;
  for (const node of inspection.nodes) {
    if (node.holder === undefined) continue;
    answered++;
    if (node.holder !== null) votes.set(node.holder, (votes.get(node.holder) ?? 0) + 1);
  }
  const top = Math.max(0, ...votes.values());
  const silent = engine.nodes.length - answered;
  // Free only when no value could reach a quorum even with every silent node holding it.
  const verdict: Verdict = inspection.held
    ? 'held'
    : top + silent >= engine.quorum
      ? 'unknown'
      : 'free';
  return {
    inspection,
    verdict,
    answered,
    holding: inspection.held ? (votes.get(inspection.holder!) ?? 0) : 0,
    keyed: [...votes.values()].reduce((sum, n) => sum + n, 0),
  };
}

/** A node that is not connected says why (the connection's error), not that its stream is closed. */
function nodeError(
  engine: LockEngine,
  index: number,
  error: string | undefined,
): string | undefined {
  if (error === undefined) return undefined;
  const node = engine.nodes[index];
  if (!node || node.client.status === 'ready') return error;
  const cause = node.connectionError;
  return `not connected (${cause ? cause.message : 'it did not answer in time'})`;
}

/** A remaining lease in ms: null when there is no key. */
function lease(node: NodeLockState): number | null {
  return node.ttl === undefined || node.ttl === -2 ? null : node.ttl;
}

function leaseText(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) return '-';
  return ms === -1 ? 'no expiry' : formatDuration(ms);
}

function inspectionJson(engine: LockEngine, judged: Judged) {
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

function verdictCell(verdict: Verdict): Cell {
  return { text: verdict, tone: verdict === 'held' ? 'good' : verdict === 'free' ? 'dim' : 'bad' };
}

/** One sentence on what the nodes say about the resource. */
function summary(engine: LockEngine, term: Terminal, judged: Judged): string {
  const { inspection, verdict, answered, holding, keyed } = judged;
  const total = engine.nodes.length;
  const fence = inspection.fence === undefined ? '' : `; last fencing token ${inspection.fence}`;
  const name = term.paint(inspection.resource, 'bold');
  if (verdict === 'held') {
    return (
      `${name} is ${term.paint('held', 'good')} by ${inspection.holder} on ${holding} of ${plural(total, 'node')} ` +
      `(quorum ${engine.quorum}); lease ends in ${leaseText(inspection.ttl)}${fence}.`
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

function nodeTable(engine: LockEngine, term: Terminal, judged: Judged): void {
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
      leaseText(lease(node)),
      node.fence === null || node.fence === undefined ? '-' : String(node.fence),
      notes[i],
    ]),
  );
}

// --- inspect --------------------------------------------------------------------

async function inspect({ engine, request, term }: CommandContext): Promise<number> {
  const judged = judge(engine, await engine.inspect(request.target!));
  if (request.json) {
    term.print(JSON.stringify(inspectionJson(engine, judged), null, 2));
  } else {
    term.print(summary(engine, term, judged));
    term.print();
    nodeTable(engine, term, judged);
    if (judged.verdict === 'free' && /[*?[]/.test(request.target!)) {
      term.note(
        `inspect takes one resource name, not a pattern; to search, run: ${BIN} list '${request.target}'`,
      );
    }
  }
  return judged.verdict === 'unknown' ? EXIT_FAILED : EXIT_OK;
}

// --- list -----------------------------------------------------------------------

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

async function list({ engine, request, term }: CommandContext): Promise<number> {
  const pattern = request.target ?? '*';
  // The listing skips nodes that do not answer, which is complete for held locks only with a quorum.
  const health = await engine.health();
  const up = health.nodes.filter((n) => n.up).length;
  const resources = await engine.list(pattern, request.limit);
  const judged = await mapBounded(resources, 50, async (resource) =>
    judge(engine, await engine.inspect(resource)),
  );
  const limitReached = resources.length >= request.limit;
  const failed = !health.quorum;
  if (request.json) {
    term.print(
      JSON.stringify(
        {
          pattern,
          limit: request.limit,
          limitReached,
          quorum: { required: engine.quorum, nodes: engine.nodes.length, answered: up },
          locks: judged.map(({ inspection, verdict, holding }) => ({
            resource: inspection.resource,
            verdict,
            holder: inspection.holder ?? null,
            lease: inspection.ttl ?? null,
            fence: inspection.fence ?? null,
            holding,
          })),
        },
        null,
        2,
      ),
    );
  } else if (judged.length === 0) {
    term.print(`No locks match '${pattern}'.`);
  } else {
    term.table(
      [
        { title: 'RESOURCE' },
        { title: 'STATE' },
        { title: 'HOLDER' },
        { title: 'NODES', align: 'right' },
        { title: 'LEASE', align: 'right' },
        { title: 'FENCE', align: 'right' },
      ],
      judged.map(({ inspection, verdict, holding }) => [
        inspection.resource,
        verdictCell(verdict),
        inspection.holder ?? '-',
        verdict === 'held' ? `${holding}/${engine.nodes.length}` : '-',
        leaseText(inspection.ttl),
        inspection.fence === undefined ? '-' : String(inspection.fence),
      ]),
    );
    term.print();
    term.print(
      `${plural(judged.length, 'resource')} matching '${pattern}'` +
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

// --- release --------------------------------------------------------------------

async function release({ engine, request, term, confirm }: CommandContext): Promise<number> {
  const resource = request.target!;
  const before = judge(engine, await engine.inspect(resource));
  const total = engine.nodes.length;
  if (before.keyed === 0) {
    const silent = total - before.answered;
    term.note(
      `${BIN}: '${resource}' is not locked on any node that answered` +
        (silent > 0 ? ` (${silent} of ${plural(total, 'node')} did not)` : '') +
        `: nothing to release. '${BIN} list' shows the locked resources.`,
    );
    return EXIT_FAILED;
  }
  if (!request.json) {
    term.print(summary(engine, term, before));
    term.print();
    nodeTable(engine, term, before);
    term.print();
  }
  if (!request.yes) {
    const yes = await confirm(
      `Force-release '${resource}'? Its holder is not told; its fencing token keeps its late writes out. [y/N] `,
    );
    if (!yes) {
      term.note('Not released.');
      return EXIT_FAILED;
    }
  }
  const deleted = await engine.forceRelease(resource);
  const short = before.answered < engine.quorum;
  if (request.json) {
    term.print(
      JSON.stringify(
        {
          resource,
          released: deleted > 0,
          deleted,
          nodes: total,
          before: inspectionJson(engine, before),
        },
        null,
        2,
      ),
    );
  } else if (deleted > 0) {
    term.print(
      `${term.paint('Released', 'good')} '${resource}': deleted its key on ${deleted} of ${plural(total, 'node')} and woke its waiters.`,
    );
  }
  if (deleted === 0) {
    term.note(`${BIN}: no node had the key any more: '${resource}' ended meanwhile.`);
    return EXIT_FAILED;
  }
  if (short) {
    term.note(
      term.paintErr(
        `Only ${before.answered} of ${plural(total, 'node')} answered; keys on the others expire with their lease.`,
        'bad',
      ),
    );
    return EXIT_FAILED;
  }
  return EXIT_OK;
}

// --- reseed ---------------------------------------------------------------------

function bounded<T>(work: Promise<T>, ms = READ_TIMEOUT_MS): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    work,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

function escapeGlob(text: string): string {
  return text.replace(/[*?[\]\\]/g, '\\$&');
}

/**
 * Whether the nodes' fence counters expire, from a sample of them: raising
 * counters that never expire with a lifetime would let them lapse and count
 * from 1 again, so a lifetime that does not match the app's is refused.
 */
async function checkCounterLifetime({ engine, request, term }: CommandContext, pattern: string) {
  const match = `${escapeGlob(request.keyPrefix)}{${pattern}}:fence`;
  const forever = new Set<string>();
  const expiring = new Set<string>();
  await Promise.allSettled(
    engine.nodes.map(async (node) => {
      if (node.client.status !== 'ready') return;
      let cursor = '0';
      const sample: string[] = [];
      do {
        const [next, keys] = await bounded(node.client.scan(cursor, 'MATCH', match, 'COUNT', 1000));
        cursor = next;
        sample.push(...keys);
      } while (cursor !== '0' && sample.length < 20);
      for (const key of sample.slice(0, 20)) {
        const ttl = await bounded(node.client.pttl(key));
        if (ttl === -1) forever.add(node.label);
        else if (ttl >= 0) expiring.add(node.label);
      }
    }),
  );
  const ttl = request.fenceCounterTtl;
  const labels = (found: Set<string>) =>
    engine.nodes
      .map((node) => node.label)
      .filter((label) => found.has(label))
      .join(', ');
  if (ttl > 0 && forever.size > 0) {
    throw new UsageError(
      `the fence counters on ${labels(forever)} never expire, so the app runs with fenceCounterTtl 0: ` +
        `write --fence-counter-ttl 0 (raised with a lifetime of ${ttl} ms, they would lapse and count from 1 again)`,
    );
  }
  if (ttl === 0 && expiring.size > 0 && forever.size === 0) {
    term.note(
      term.paintErr(
        `The fence counters on ${labels(expiring)} expire, but --fence-counter-ttl 0 raises them for good: ` +
          "safe, but they will not be cleaned up; pass the app's fenceCounterTtl next time.",
        'warn',
      ),
    );
  }
}

async function reseed(context: CommandContext): Promise<number> {
  const { engine, request, term } = context;
  const pattern = request.target ?? '*';
  await checkCounterLifetime(context, pattern);
  let raised: Record<string, number>;
  try {
    raised = await engine.reseedFences(pattern);
  } catch (error) {
    if (!(error instanceof LockUnavailableError)) throw error;
    const failures = error.failures.map((failure) => {
      const index = engine.nodes.findIndex((node) => node.label === failure.node);
      return `${failure.node}: ${nodeError(engine, index, failure.error.message)}`;
    });
    term.note(
      `${BIN}: reseed needs every node to answer, and ${failures.length} of ${plural(engine.nodes.length, 'node')} did not ` +
        `(${failures.join('; ')}). Nothing is lost: counters are only ever raised. Run it again once they answer.`,
    );
    return EXIT_FAILED;
  }
  const total = Object.values(raised).reduce((sum, n) => sum + n, 0);
  if (request.json) {
    term.print(
      JSON.stringify({ pattern, fenceCounterTtl: request.fenceCounterTtl, raised, total }, null, 2),
    );
    return EXIT_OK;
  }
  term.table(
    [{ title: 'NODE' }, { title: 'RAISED', align: 'right' }],
    Object.entries(raised).map(([node, count]) => [
      node,
      count > 0 ? { text: String(count), tone: 'warn' } : '0',
    ]),
  );
  term.print();
  const lifetime =
    request.fenceCounterTtl === 0
      ? 'never expire'
      : `live ${formatDuration(request.fenceCounterTtl)}`;
  term.print(
    total === 0
      ? `Every fence counter matching '${pattern}' was already at its highest value on every node.`
      : `Raised ${plural(total, 'fence counter')} to the highest value any node had ` +
          `(matching '${pattern}'; raised counters ${lifetime}).`,
  );
  return EXIT_OK;
}

// --- health ---------------------------------------------------------------------

/** The set-up risks the engine checks on connect, read from the nodes that are up. */
async function setupRisks(engine: LockEngine, health: LockHealth): Promise<string[]> {
  const unreadable: string[] = [];
  const facts = await Promise.all(
    engine.nodes.map((node, i): Promise<NodeFacts | undefined> | undefined =>
      health.nodes[i].up
        ? bounded(readNodeFacts(node)).catch((error: Error) => {
            unreadable.push(
              `could not check the set-up of node ${node.label} (${error.message}); allow INFO and CONFIG GET to its user.`,
            );
            return undefined;
          })
        : undefined,
    ),
  );
  const risks = findRisks(
    engine.nodes.map((n) => n.label),
    facts,
    engine.options.fencing,
    engine.options.fenceCounterTtl,
  );
  return [...risks, ...unreadable];
}

async function health({ engine, request, term }: CommandContext): Promise<number> {
  const report = await engine.health();
  const risks = await setupRisks(engine, report);
  const up = report.nodes.filter((n) => n.up).length;
  const nodes = report.nodes.map((node, i) => ({
    node: node.node,
    up: node.up,
    latency: node.latency === undefined ? null : Math.round(node.latency * 100) / 100,
    error: nodeError(engine, i, node.error) ?? null,
  }));
  if (request.json) {
    term.print(
      JSON.stringify(
        {
          quorum: report.quorum,
          required: report.required,
          up,
          nodes,
          risks,
        },
        null,
        2,
      ),
    );
  } else {
    const columns: Column[] = [
      { title: 'NODE' },
      { title: 'STATUS' },
      { title: 'LATENCY', align: 'right' },
    ];
    if (nodes.some((node) => node.error)) columns.push({ title: 'NOTE' });
    term.table(
      columns,
      nodes.map((node) => [
        node.node,
        node.up ? { text: 'up', tone: 'good' } : { text: 'down', tone: 'bad' },
        node.latency === null ? '-' : formatLatency(node.latency),
        node.error ? { text: node.error, tone: 'bad' } : '',
      ]),
    );
    term.print();
    term.print(
      report.quorum
        ? `${term.paint('Quorum reachable', 'good')}: ${up} of ${plural(report.nodes.length, 'node')} up, ${report.required} needed.`
        : `${term.paint('No quorum', 'bad')}: ${up} of ${plural(report.nodes.length, 'node')} up, ${report.required} needed; no lock can be granted.`,
    );
    if (risks.length > 0) {
      term.print();
      term.print(term.paint('Set-up risks:', 'warn'));
      for (const risk of risks) term.print(`  - ${risk}`);
    }
  }
  return report.quorum ? EXIT_OK : EXIT_FAILED;
}

export const COMMAND_RUNNERS: Readonly<
  Record<CommandName, (context: CommandContext) => Promise<number>>
> = { inspect, list, release, reseed, health };
