import {
  OURS,
  OURS_NO_FENCING,
  peers,
  peersBothWays,
  RAW,
  RAW_SCRIPTS,
  type Contender,
} from '../contenders/index.js';
import { HEADLINES, type Headlines, type PlainLoopFigures } from '../report/targets.js';
import type { BenchContext } from '../support/bench-context.js';
import { ANATOMY_COLUMNS, measureAnatomy, type CycleAnatomy } from '../support/cycle-anatomy.js';
import { formatMs } from '../../dev/text.js';
import { formatRate, formatRatio, pairedRatio } from '../support/format.js';
import type { ReportTable, Scenario, ScenarioResult } from './scenario.js';
import {
  measureUncontended,
  median,
  spread,
  uniqueSettings,
  TTL,
  type UncontendedRow,
} from './uncontended.scenario.js';

/** Callers per process: one request at a time, a few, a busy service. */
export const PLAIN_LOOP_CALLERS = [1, 4, 32] as const;

/**
 * Ours first, then each peer with its defaults and tuned, then what a cycle
 * of ours is made of: the same without fencing, our scripts sent by hand (no
 * engine), and the peers' bare commands sent by hand (see breakdown()).
 */
function contenders(): Contender[] {
  return [OURS, ...peersBothWays(), OURS_NO_FENCING, RAW_SCRIPTS, RAW];
}

interface Cell {
  readonly callers: number;
  readonly nodes: number;
  readonly rows: readonly UncontendedRow[];
}

/** One library's lone-caller cycle, split at its socket writes and reads (see CycleAnatomy). */
interface AnatomyRow {
  readonly nodes: number;
  readonly contender: Contender;
  readonly anatomy: CycleAnatomy | undefined;
  readonly error: string | undefined;
}

/** Cycles per library in the anatomy, after as many unmeasured ones as ANATOMY_WARMUP. */
const ANATOMY_CYCLES = 3000;
const ANATOMY_WARMUP = 1000;

/** Ours, the peers with their defaults (the lone caller's best peers), and the floors. */
function anatomyContenders(): Contender[] {
  return [OURS, ...peers('defaults'), RAW_SCRIPTS, RAW];
}

/** A lone caller's cycle for each library, one after the other, on fresh keys. */
async function measureAnatomies(context: BenchContext, nodes: number): Promise<AnatomyRow[]> {
  const rows: AnatomyRow[] = [];
  for (const contender of anatomyContenders()) {
    await context.reset();
    try {
      const anatomy = await context.withSession(contender, nodes, { mode: 'try', ttl: TTL }, (s) =>
        measureAnatomy(s, {
          cycles: ANATOMY_CYCLES,
          warmup: ANATOMY_WARMUP,
          keyPrefix: `anatomy:${nodes}:${contender.id}`,
        }),
      );
      rows.push({ nodes, contender, anatomy, error: undefined });
    } catch (error) {
      rows.push({ nodes, contender, anatomy: undefined, error: (error as Error).message });
    }
  }
  return rows;
}

/** The figures a user's loop sees: the median round's rate and the whole cycle's latency. */
function figures(row: UncontendedRow): PlainLoopFigures {
  return {
    label: row.contender.label,
    rate: median(row.rates),
    p50: row.latency.p50,
    p99: row.latency.p99,
  };
}

/** Per round, the fastest peer's rate; rounds where no peer ran are NaN. */
function bestPeerPerRound(rows: readonly UncontendedRow[]): number[] {
  const peers = rows.filter((row) => row.contender.kind === 'peer' && !row.error);
  const rounds = Math.max(0, ...peers.map((row) => row.rates.length));
  return Array.from({ length: rounds }, (_, i) =>
    Math.max(...peers.map((row) => row.rates[i] ?? NaN).filter(Number.isFinite)),
  );
}

/** Ours and the peer with the highest median round, in one cell. */
function summarise(cell: Cell): NonNullable<Headlines['plainLoop']>[number] {
  const ours = cell.rows.find((row) => row.contender.kind === 'ours' && !row.error);
  let best: UncontendedRow | undefined;
  for (const row of cell.rows) {
    if (row.contender.kind !== 'peer' || row.error) continue;
    if (!best || median(row.rates) > median(best.rates)) best = row;
  }
  return {
    callers: cell.callers,
    nodes: cell.nodes,
    ours: ours && figures(ours),
    best: best && figures(best),
    paired: ours ? pairedRatio(ours.rates, bestPeerPerRound(cell.rows)) : undefined,
  };
}

export const plainLoopScenario: Scenario = {
  number: 7,
  id: 'plain-loop',
  title: 'Plain loop: what an application’s own loop sees',
  description:
    `${PLAIN_LOOP_CALLERS.join(', ')} async callers in one process, each looping \`const lock = await tryAcquire(key); await release(lock)\` on a fresh key per cycle, ` +
    'for our engine and every peer in both configurations, on the same nodes. ' +
    'Interleaved rounds (every library once per round with fresh clients and a warm-up, the order reversed each round; the nodes flushed before each); ' +
    'cycles/s is the **median round**, the latency spans the whole cycle (acquire + release) over all rounds, and the ratio is ours over the peer with the highest median round. ' +
    'These are the headline figures.',
  defaultNodes: [1, 3, 5],
  async run(context: BenchContext): Promise<ScenarioResult> {
    const cells: Cell[] = [];
    for (const callers of PLAIN_LOOP_CALLERS) {
      for (const nodes of context.nodeCounts(this.defaultNodes)) {
        const rows = await measureUncontended(context, contenders(), nodes, {
          callers,
          timed: 'cycle',
          keyPrefix: `plain:${callers}`,
        });
        cells.push({ callers, nodes, rows });
      }
    }
    const anatomies: AnatomyRow[] = [];
    for (const nodes of context.nodeCounts(this.defaultNodes)) {
      anatomies.push(...(await measureAnatomies(context, nodes)));
    }
    const summaries = cells.map(summarise);
    const headlines = (context.shared.get(HEADLINES) ?? {}) as Headlines;
    headlines.plainLoop = summaries;
    context.shared.set(HEADLINES, headlines);
    return report(cells, summaries, anatomies);
  },
};

function report(
  cells: readonly Cell[],
  summaries: NonNullable<Headlines['plainLoop']>,
  anatomies: readonly AnatomyRow[],
): ScenarioResult {
  const summary: ReportTable = {
    title: 'Ours against the best peer',
    headers: [
      'callers',
      'nodes',
      'ours cycles/s',
      'best peer',
      'its cycles/s',
      'ours / best peer',
      'median of per-round ratios',
      'cycle p50: ours',
      'best peer',
      'cycle p99: ours',
      'best peer',
    ],
    align: ['r', 'r', 'r', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
    rows: summaries.map((s) => [
      String(s.callers),
      String(s.nodes),
      s.ours ? formatRate(s.ours.rate) : 'failed',
      s.best?.label ?? '–',
      s.best ? formatRate(s.best.rate) : '–',
      s.ours ? `**${formatRatio(s.ours.rate, s.best?.rate)}**` : '–',
      s.paired === undefined ? '–' : `${s.paired.toFixed(2)}×`,
      s.ours ? formatMs(s.ours.p50) : '–',
      s.best ? formatMs(s.best.p50) : '–',
      s.ours ? formatMs(s.ours.p99) : '–',
      s.best ? formatMs(s.best.p99) : '–',
    ]),
    notes: [
      'Rates are median rounds; "best peer" is the peer (either configuration) with the highest median round in that cell.',
      '"median of per-round ratios": in each round, ours over the fastest peer of that round, then the median over rounds; a round slowed by load from outside the bench slows every library in it, so this ratio moves less with such load than the ratio of medians.',
    ],
  };
  const detail: ReportTable = {
    title: 'Every library',
    headers: [
      'callers',
      'nodes',
      'library',
      'cycles/s (median round)',
      'rounds min–max',
      'cycle p50',
      'cycle p99',
      'CPU µs/cycle: client',
      'redis',
      '× best peer',
    ],
    align: ['r', 'r', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
    rows: cells.flatMap((cell, c) =>
      cell.rows.map((row) =>
        row.error
          ? [
              String(cell.callers),
              String(cell.nodes),
              row.contender.label,
              `failed: ${row.error}`,
              ...new Array<string>(6).fill(''),
            ]
          : [
              String(cell.callers),
              String(cell.nodes),
              row.contender.kind === 'ours' ? `**${row.contender.label}**` : row.contender.label,
              formatRate(median(row.rates)) + (row.errors ? ` (${row.errors} errors)` : ''),
              spread(row.rates),
              formatMs(row.latency.p50),
              formatMs(row.latency.p99),
              row.clientCpu.toFixed(1),
              row.redisCpu.toFixed(1),
              formatRatio(median(row.rates), summaries[c].best?.rate),
            ],
      ),
    ),
    notes: [
      `Lease (ttl) ${TTL / 1000} s; keys \`plain:<callers>:<library>:<round>:<caller>:<i>\`, never reused.`,
      '"CPU µs/cycle": CPU time per cycle (warm-up included) in this process and in the redis-servers (all nodes together).',
      ...uniqueSettings(cells.flatMap((cell) => cell.rows)),
    ],
  };
  return {
    tables: [summary, breakdown(cells), anatomyTable(anatomies), detail],
    charts: [],
    data: {
      cells: cells.map((cell, c) => ({
        callers: cell.callers,
        nodes: cell.nodes,
        summary: summaries[c],
        rows: cell.rows.map(({ contender, ...row }) => ({
          id: contender.id,
          label: contender.label,
          medianRate: median(row.rates),
          ...row,
        })),
      })),
      anatomies: anatomies.map(({ contender, ...row }) => ({ id: contender.id, ...row })),
    },
  };
}

/** The anatomy of a lone caller's cycle, per node count and library. */
function anatomyTable(rows: readonly AnatomyRow[]): ReportTable {
  const us = (value: number) => (Number.isFinite(value) ? value.toFixed(1) : '–');
  return {
    title: 'A lone caller’s cycle, where the time goes',
    headers: ['nodes', 'library', 'cycle µs', ...ANATOMY_COLUMNS.map((c) => c.label), 'cycles'],
    align: ['r', 'l', 'r', ...ANATOMY_COLUMNS.map(() => 'r' as const), 'r'],
    rows: rows.map(({ nodes, contender, anatomy, error }) => {
      const label = contender.kind === 'ours' ? `**${contender.label}**` : contender.label;
      if (!anatomy)
        return [String(nodes), label, `failed: ${error}`, ...ANATOMY_COLUMNS.map(() => ''), ''];
      return [
        String(nodes),
        label,
        us(anatomy.total),
        ...ANATOMY_COLUMNS.map((c) => us(anatomy[c.key])),
        String(anatomy.cycles),
      ];
    }),
    notes: [
      `One caller, ${ANATOMY_CYCLES} cycles per library (\`acquire\` then \`release\` on a fresh key) after ${ANATOMY_WARMUP} unmeasured ones, the libraries one after the other on the same nodes; each figure is a mean in µs per cycle, over both halves of the cycle. Every socket write of the process is timed, and the time of every \`data\` event noted, so the columns add up to the cycle.`,
      '"code before the write": from the call to its first socket write; "code after the reply": from the reply that settled the call (the last one read before it settled: on several nodes, the one that made the majority) to the call\'s promise settling. The two are what the library\'s own code costs on a lone caller\'s path (with ioredis\'s work on the command and the reply).',
      '"socket writes": inside the write calls, the system calls that hand the commands to the kernel (on this machine a loopback write also wakes the node). "between writes": on several nodes, the time between the first write and the last that was not spent writing.',
      '"waiting for the nodes": from the last write to the settling reply: the nodes\' work on the command (for our engine: its scripts, against the peers\' bare `SET` and compare-and-delete), and the way there and back.',
      `Against "${RAW_SCRIPTS.label}" (the same scripts, sent by hand), our engine's extra "code before the write" and "code after the reply" is what its own code costs; against "${RAW.label}", the floors' difference in "waiting for the nodes" is what the protocol's extra work (the fence counter, the waiters' line checks) costs on the node.`,
    ],
  };
}

/**
 * Where a cycle of ours goes, as ratios of rates measured in the same rounds
 * (the median of the per-round ratios): the peers' bare `SET NX PX` by hand,
 * our engine's scripts by hand, the engine with fencing off, the engine.
 */
function breakdown(cells: readonly Cell[]): ReportTable {
  const rowOf = (cell: Cell, id: string) =>
    cell.rows.find((row) => row.contender.id === id && !row.error);
  const ratio = (a: UncontendedRow | undefined, b: UncontendedRow | undefined) => {
    const r = a && b ? pairedRatio(a.rates, b.rates) : undefined;
    return r === undefined ? '–' : `${r.toFixed(2)}×`;
  };
  return {
    title: 'Where a cycle of ours goes',
    headers: [
      'callers',
      'nodes',
      'bare SET by hand cycles/s',
      'our scripts by hand × bare SET',
      'ours, fencing off × our scripts by hand',
      'ours × our scripts by hand',
      'ours × bare SET',
    ],
    align: ['r', 'r', 'r', 'r', 'r', 'r', 'r'],
    rows: cells.map((cell) => {
      const bare = rowOf(cell, RAW.id);
      const scripts = rowOf(cell, RAW_SCRIPTS.id);
      const ours = rowOf(cell, OURS.id);
      return [
        String(cell.callers),
        String(cell.nodes),
        bare ? formatRate(median(bare.rates)) : '–',
        ratio(scripts, bare),
        ratio(rowOf(cell, OURS_NO_FENCING.id), scripts),
        ratio(ours, scripts),
        ratio(ours, bare),
      ];
    }),
    notes: [
      'Each ratio is the median over the rounds of the two rates measured in the same round.',
      `"bare SET by hand" (${RAW.label}): what the peers send, \`SET NX PX\` then a compare-and-delete script, with no library around it (on several nodes, every node in parallel, each round done at a majority).`,
      `"our scripts by hand" (${RAW_SCRIPTS.label}): our engine's ACQUIRE and RELEASE scripts with the arguments the engine sends, in the same loop, with no engine: against the bare SET it is the cost of the protocol (the fence counter's INCR, the check for a waiters' line before a grant and before a release's message); the engine against it is the cost of the engine's own code (the quorum round and its timer, the lock object, events, renewal books).`,
      '"ours, fencing off": the engine without the fence counter, against the scripts by hand with it.',
    ],
  };
}
