import {
  OURS,
  OURS_PLAIN_CLIENTS,
  RAW,
  RAW_AP,
  peers,
  type Contender,
} from '../contenders/index.js';
import type { BenchContext } from '../support/bench-context.js';
import { formatMs, formatRate, formatRatio } from '../support/format.js';
import { LatencyRecorder, type LatencySummary } from '../support/latency.js';
import { uncontendedLoad } from '../support/lock-load.js';
import type { ReportTable, Scenario, ScenarioResult } from './scenario.js';

export const CONCURRENCY = 32;
export const TTL = 10_000;

export interface UncontendedRow {
  readonly contender: Contender;
  readonly nodes: number;
  /** The best round's cycles/s. */
  readonly rate: number;
  /** Cycles/s of each round. */
  readonly rates: readonly number[];
  /** Acquire latency over all rounds. */
  readonly latency: LatencySummary;
  /** CPU µs per cycle in this process (client side: library + ioredis + GC). */
  readonly clientCpu: number;
  /** CPU µs per cycle in the redis-servers, summed over the nodes. */
  readonly redisCpu: number;
  readonly cycles: number;
  readonly errors: number;
  readonly firstError: string | undefined;
  /** Set when the library failed outright (could not connect, threw on every call). */
  readonly error: string | undefined;
}

/** Floors measured in this run, per node count, for other scenarios' ratios. */
export const FLOORS_KEY = 'uncontended.floors';
export type Floors = Map<number, { raw?: number; rawAp?: number }>;

/**
 * Runs the uncontended loop of every contender on `count` nodes, in rounds:
 * each round gives every contender a fresh session, a warm-up and a measured
 * window, in alternating order, so that load from outside the bench that
 * comes and goes spreads over all of them. The rate is the best round:
 * outside load only ever slows a round down, so on a shared machine the best
 * round is the closest to what the library does undisturbed.
 */
export async function measureUncontended(
  context: BenchContext,
  contenders: readonly Contender[],
  count: number,
): Promise<UncontendedRow[]> {
  const { warmupMs, measureMs, rounds } = context.timing;
  const runs = contenders.map((contender) => ({
    contender,
    rates: [] as number[],
    latency: new LatencyRecorder(),
    clientCpu: 0,
    redisCpu: 0,
    allCycles: 0,
    cycles: 0,
    errors: 0,
    firstError: undefined as string | undefined,
    error: undefined as string | undefined,
  }));
  for (let round = 0; round < rounds; round++) {
    for (const run of round % 2 === 0 ? runs : [...runs].reverse()) {
      if (run.error) continue;
      await context.reset();
      try {
        const result = await context.withSession(
          run.contender,
          count,
          { mode: 'try', ttl: TTL },
          async (session) => {
            const redis0 = await context.redisCpuSeconds(count);
            const client0 = process.cpuUsage();
            const loaded = await uncontendedLoad(session, {
              concurrency: CONCURRENCY,
              warmupMs,
              measureMs,
              keyPrefix: `u:${run.contender.id}:${round}`,
              latency: run.latency,
            });
            const client = process.cpuUsage(client0);
            run.clientCpu += client.user + client.system;
            run.redisCpu += ((await context.redisCpuSeconds(count)) - redis0) * 1e6;
            run.allCycles += loaded.allCycles;
            return loaded;
          },
        );
        run.rates.push(result.rate);
        run.cycles += result.cycles;
        run.errors += result.errors;
        run.firstError ??= result.firstError;
      } catch (error) {
        run.error = (error as Error).message;
      }
    }
  }
  return runs.map((run) => {
    const row: UncontendedRow = {
      contender: run.contender,
      nodes: count,
      rate: run.rates.length > 0 ? Math.max(...run.rates) : NaN,
      rates: run.rates,
      latency: run.latency.summary(),
      clientCpu: run.clientCpu / run.allCycles,
      redisCpu: run.redisCpu / run.allCycles,
      cycles: run.cycles,
      errors: run.errors,
      firstError: run.firstError,
      error: run.error,
    };
    context.log(
      row.error
        ? `  ${count} node(s)  ${row.contender.label}: FAILED ${row.error}`
        : `  ${count} node(s)  ${row.contender.label.padEnd(34)} ${formatRate(row.rate).padStart(8)}/s (${spread(row.rates)})  p50 ${formatMs(row.latency.p50)}  p99 ${formatMs(row.latency.p99)}  CPU/cycle client ${row.clientCpu.toFixed(1)} µs, redis ${row.redisCpu.toFixed(1)} µs` +
            (row.errors ? `  errors ${row.errors}: ${row.firstError}` : ''),
    );
    return row;
  });
}

/** The rounds' range, e.g. `48.1k-55.0k`. */
export function spread(rates: readonly number[]): string {
  if (rates.length < 2) return '';
  const k = (v: number) => `${(v / 1000).toFixed(1)}k`;
  return `${k(Math.min(...rates))}–${k(Math.max(...rates))}`;
}

/** Floors, then each peer with plain and with auto-pipelining clients, then ours. */
function contenders(): Contender[] {
  const plus = peers(true);
  return [
    RAW,
    RAW_AP,
    ...peers(false).flatMap((peer, i) => [peer, plus[i]]),
    OURS_PLAIN_CLIENTS,
    OURS,
  ];
}

export const uncontendedScenario: Scenario = {
  number: 1,
  id: 'uncontended',
  title: 'Uncontended lock + unlock',
  description:
    `${CONCURRENCY} concurrent callers in one process; each loops: acquire a fresh key (one attempt, no retries), release it. ` +
    'Measured in interleaved rounds (every library once per round, order reversed each round, fresh clients and a warm-up each time); ' +
    'cycles/s is the best round (load from outside only slows a round down; the range shows how much it did), acquire latency an HDR histogram over all rounds. The nodes are flushed before every run.',
  defaultNodes: [1, 3, 5],
  async run(context: BenchContext): Promise<ScenarioResult> {
    const rows: UncontendedRow[] = [];
    const floors: Floors = new Map();
    for (const count of context.nodeCounts(this.defaultNodes)) {
      for (const row of await measureUncontended(context, contenders(), count)) {
        rows.push(row);
        if (!row.error && row.contender.kind === 'floor') {
          const entry = floors.get(count) ?? {};
          if (row.contender.id === 'raw') entry.raw = row.rate;
          else entry.rawAp = row.rate;
          floors.set(count, entry);
        }
      }
    }
    context.shared.set(FLOORS_KEY, floors);
    return report(rows, floors);
  },
};

function report(rows: readonly UncontendedRow[], floors: Floors): ScenarioResult {
  const counts = [...new Set(rows.map((row) => row.nodes))];
  const bestPeer = new Map<number, { rate: number; label: string }>();
  for (const row of rows) {
    if (row.contender.kind !== 'peer' || row.error) continue;
    const best = bestPeer.get(row.nodes);
    if (!best || row.rate > best.rate) {
      bestPeer.set(row.nodes, { rate: row.rate, label: row.contender.label });
    }
  }
  const table: ReportTable = {
    title: 'Uncontended cycles per second',
    headers: [
      'nodes',
      'library',
      'cycles/s (best round)',
      'rounds min–max',
      'acquire p50',
      'acquire p99',
      'CPU µs/cycle: client',
      'redis',
      '× best peer',
      '× raw floor',
      '× raw floor +AP',
    ],
    align: ['r', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
    rows: rows.map((row) => {
      const floor = floors.get(row.nodes);
      if (row.error) {
        return [
          String(row.nodes),
          row.contender.label,
          `failed: ${row.error}`,
          '',
          '',
          '',
          '',
          '',
          '',
          '',
          '',
        ];
      }
      return [
        String(row.nodes),
        row.contender.kind === 'ours' ? `**${row.contender.label}**` : row.contender.label,
        formatRate(row.rate) + (row.errors ? ` (${row.errors} errors)` : ''),
        spread(row.rates),
        formatMs(row.latency.p50),
        formatMs(row.latency.p99),
        row.clientCpu.toFixed(1),
        row.redisCpu.toFixed(1),
        formatRatio(row.rate, bestPeer.get(row.nodes)?.rate),
        formatRatio(row.rate, floor?.raw),
        formatRatio(row.rate, floor?.rawAp),
      ];
    }),
    notes: [
      `Best peer per node count: ${counts.map((n) => `${n} node(s): ${bestPeer.get(n)?.label ?? '–'}`).join('; ')}.`,
      '"CPU µs/cycle": CPU time per lock cycle (warm-up included) in this process (the library, ioredis, GC) and in the redis-servers (all nodes together). ' +
        'Unlike cycles/s these hardly move with load from other processes on the machine, so they are the steadier basis for comparing libraries here.',
      '"+AP": the library was given ioredis clients with `enableAutoPipelining: true` (our engine opens its clients that way by default; "ours, plain clients" is the engine given plain clients).',
      ...uniqueSettings(rows),
    ],
  };
  const chartSeries = rows.filter((row) => !row.error);
  return {
    tables: [table],
    charts: [
      {
        title: 'Uncontended lock + unlock cycles/s (32 callers)',
        unit: 'cycles/s',
        groups: counts.map((n) => ({
          label: `${n} node${n > 1 ? 's' : ''}`,
          bars: chartSeries
            .filter((row) => row.nodes === n)
            .map((row) => ({ series: row.contender.label, value: row.rate })),
        })),
      },
    ],
    data: rows.map(({ contender, ...row }) => ({
      id: contender.id,
      label: contender.label,
      ...row,
    })),
  };
}

export function uniqueSettings(rows: readonly { contender: Contender }[]): string[] {
  const seen = new Map<string, string>();
  for (const { contender } of rows) {
    const name = contender.label.replace(/ \+AP$/, '');
    if (!seen.has(name))
      seen.set(
        name,
        contender.settings.replace(/; clients (with|without) enableAutoPipelining$/, ''),
      );
  }
  return [...seen].map(([name, settings]) => `${name}: ${settings}.`);
}
