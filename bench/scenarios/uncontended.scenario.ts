import {
  OURS,
  OURS_AP_CLIENTS,
  RAW,
  RAW_AP,
  peersBothWays,
  type Contender,
  type PeerConfig,
} from '../contenders/index.js';
import { HEADLINES, type Best, type Headlines } from '../report/targets.js';
import type { BenchContext } from '../support/bench-context.js';
import { formatMs } from '../../dev/text.js';
import { formatRate, formatRatio } from '../support/format.js';
import { LatencyRecorder, type LatencySummary } from '../support/latency.js';
import { uncontendedLoad, type Timed } from '../support/lock-load.js';
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
  /**
   * Cores kept busy on average by this process and the redis-servers
   * together while it ran (warm-ups included): below the machine's cores,
   * the loop waited on something other than CPU.
   */
  readonly busyCores: number;
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
 *
 * A round that counts nothing comes first: every contender runs once so that
 * V8 has compiled its code (and ioredis's, which all share) before any round
 * is measured. Without it the first library of the first round ran on cold
 * code: that round of ours was about half as fast as its others, and its
 * slowest cycles set ours' p99.
 */
export async function measureUncontended(
  context: BenchContext,
  contenders: readonly Contender[],
  count: number,
  loop: { callers?: number; timed?: Timed; keyPrefix?: string; rounds?: number } = {},
): Promise<UncontendedRow[]> {
  const { callers = CONCURRENCY, timed = 'acquire', keyPrefix = 'u' } = loop;
  const { warmupMs, measureMs } = context.timing;
  const rounds = loop.rounds ?? context.timing.rounds;
  const runs = contenders.map((contender) => ({
    contender,
    rates: [] as number[],
    latency: new LatencyRecorder(),
    clientCpu: 0,
    redisCpu: 0,
    wallMicros: 0,
    allCycles: 0,
    cycles: 0,
    errors: 0,
    firstError: undefined as string | undefined,
    error: undefined as string | undefined,
  }));
  for (const run of runs) {
    await context.reset();
    await context
      .withSession(run.contender, count, { mode: 'try', ttl: TTL }, (session) =>
        uncontendedLoad(session, {
          concurrency: callers,
          warmupMs: warmupMs + measureMs,
          measureMs: 0,
          keyPrefix: `${keyPrefix}:${run.contender.id}:warm-up`,
          timed,
        }),
      )
      // A library that fails here fails its measured rounds too, which report it.
      .catch(() => undefined);
  }
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
            const wall0 = performance.now();
            const loaded = await uncontendedLoad(session, {
              concurrency: callers,
              warmupMs,
              measureMs,
              keyPrefix: `${keyPrefix}:${run.contender.id}:${round}`,
              latency: run.latency,
              timed,
            });
            const client = process.cpuUsage(client0);
            run.wallMicros += (performance.now() - wall0) * 1000;
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
      busyCores: (run.clientCpu + run.redisCpu) / run.wallMicros,
      cycles: run.cycles,
      errors: run.errors,
      firstError: run.firstError,
      error: run.error,
    };
    context.log(
      row.error
        ? `  ${count} node(s)  ${row.contender.label}: FAILED ${row.error}`
        : `  ${count} node(s)${callers === CONCURRENCY ? '' : `, ${callers} caller(s)`}  ${row.contender.label.padEnd(34)} ${formatRate(row.rate).padStart(8)}/s (${spread(row.rates)})  ${timed} p50 ${formatMs(row.latency.p50)}  p99 ${formatMs(row.latency.p99)}  CPU/cycle client ${row.clientCpu.toFixed(1)} µs, redis ${row.redisCpu.toFixed(1)} µs, busy ${row.busyCores.toFixed(2)} cores` +
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

/** Floors, then each peer with its defaults and tuned, then ours. */
function contenders(): Contender[] {
  return [RAW, RAW_AP, ...peersBothWays(), OURS_AP_CLIENTS, OURS];
}

/** The fastest peer per node count in one configuration. */
export function bestPeers(
  rows: readonly UncontendedRow[],
  config: PeerConfig,
): Map<number, { rate: number; label: string }> {
  const best = new Map<number, { rate: number; label: string }>();
  for (const row of rows) {
    if (row.contender.kind !== 'peer' || row.contender.config !== config || row.error) continue;
    const current = best.get(row.nodes);
    if (!current || row.rate > current.rate) {
      best.set(row.nodes, { rate: row.rate, label: row.contender.label });
    }
  }
  return best;
}

export function median(values: readonly number[]): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
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
    const headlines = (context.shared.get(HEADLINES) ?? {}) as Headlines;
    const bestDefaults = bestPeers(rows, 'defaults');
    const bestTuned = bestPeers(rows, 'tuned');
    const rateOf = (id: string, n: number) =>
      rows.find((row) => row.contender.id === id && row.nodes === n && !row.error)?.rate;
    headlines.uncontended = [...floors.keys()].map((n) => ({
      nodes: n,
      ours: rateOf(OURS.id, n),
      oursAp: rateOf(OURS_AP_CLIENTS.id, n),
      bestDefaults: bestDefaults.get(n) as Best | undefined,
      bestTuned: bestTuned.get(n) as Best | undefined,
      raw: floors.get(n)?.raw,
      rawAp: floors.get(n)?.rawAp,
    }));
    context.shared.set(HEADLINES, headlines);
    return report(rows, floors);
  },
};

function report(rows: readonly UncontendedRow[], floors: Floors): ScenarioResult {
  const counts = [...new Set(rows.map((row) => row.nodes))];
  const bestDefaults = bestPeers(rows, 'defaults');
  const bestTuned = bestPeers(rows, 'tuned');
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
      '× best peer, defaults',
      '× best peer, tuned',
      '× raw floor',
      '× raw floor +AP',
    ],
    align: ['r', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
    rows: rows.map((row) => {
      const floor = floors.get(row.nodes);
      if (row.error) {
        return [
          String(row.nodes),
          row.contender.label,
          `failed: ${row.error}`,
          ...new Array<string>(9).fill(''),
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
        formatRatio(row.rate, bestDefaults.get(row.nodes)?.rate),
        formatRatio(row.rate, bestTuned.get(row.nodes)?.rate),
        formatRatio(row.rate, floor?.raw),
        formatRatio(row.rate, floor?.rawAp),
      ];
    }),
    notes: [
      `Best peer per node count, defaults: ${counts.map((n) => `${n} node(s): ${bestDefaults.get(n)?.label ?? '–'}`).join('; ')}. ` +
        `Tuned: ${counts.map((n) => `${n} node(s): ${bestTuned.get(n)?.label ?? '–'}`).join('; ')}.`,
      '"defaults": the peer as its README sets it up: plain ioredis clients (`new Redis(url)`) and its default options. "tuned +AP": ioredis clients with `enableAutoPipelining: true` and the cheapest settings (single attempt, no extras such as health-check PINGs or auto-refresh timers). ' +
        'No key is ever busy here, so retry settings play no part in this scenario; clients and extras do.',
      '"CPU µs/cycle": CPU time per lock cycle (warm-up included) in this process (the library, ioredis, GC) and in the redis-servers (all nodes together). ' +
        'Unlike cycles/s these hardly move with load from other processes on the machine, so they are the steadier basis for comparing libraries here.',
      'Our engine opens plain clients by default ("ours (LockEngine)"); it sends the lock scripts of one turn to each node as one BATCH command; "ours, auto-pipelining clients" is the engine given ioredis clients with enableAutoPipelining.',
      ...uniqueSettings(rows),
    ],
  };
  const ours = counts.map((n) => ({
    nodes: n,
    ap: rows.find((row) => row.nodes === n && row.contender.id === OURS_AP_CLIENTS.id),
    plain: rows.find((row) => row.nodes === n && row.contender.id === OURS.id),
  }));
  const oursTable: ReportTable = {
    title: 'Our engine: plain clients (its default) vs auto-pipelining clients',
    headers: [
      'nodes',
      'clients',
      'cycles/s (best round)',
      'median round',
      'rounds min–max',
      'acquire p50',
      'acquire p99',
      'CPU µs/cycle: client',
      'redis',
      'total',
      'cores busy',
      'AP / plain (best)',
      'AP / plain (median)',
    ],
    align: ['r', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
    rows: ours.flatMap(({ nodes, ap, plain }) =>
      (
        [
          ['plain (default)', plain],
          ['auto-pipelining', ap],
        ] as const
      ).map(([name, row]) =>
        !row || row.error
          ? [
              String(nodes),
              name,
              `failed: ${row?.error ?? 'not run'}`,
              ...new Array<string>(9).fill(''),
            ]
          : [
              String(nodes),
              name,
              formatRate(row.rate),
              formatRate(median(row.rates)),
              spread(row.rates),
              formatMs(row.latency.p50),
              formatMs(row.latency.p99),
              row.clientCpu.toFixed(1),
              row.redisCpu.toFixed(1),
              (row.clientCpu + row.redisCpu).toFixed(1),
              row.busyCores.toFixed(2),
              row === ap && plain && !plain.error ? formatRatio(ap.rate, plain.rate) : '',
              row === ap && plain && !plain.error
                ? formatRatio(median(ap.rates), median(plain.rates))
                : '',
            ],
      ),
    ),
    notes: [
      'The same rows as in the table above, side by side. Auto-pipelining sends the commands of all callers issued in one tick as one write per node: fewer system calls and far less redis-server CPU per cycle, at the price of holding each command until the tick ends.',
      '"cores busy": CPU of this process and the redis-servers together over the wall time of the runs (warm-ups included); this machine has 2. A loop that keeps fewer busy waited on something other than CPU (or, on a shared machine, for other processes). ioredis keeps at most one auto-pipeline in flight per connection (commands issued meanwhile wait until it returns, then go out as the next batch), while plain clients send each command at once.',
      'With 3 and 5 nodes every cycle costs one command per node, and the redis-servers’ per-command cost (a read and a write system call each) dominates; batching those is what keeps the cores from saturating.',
    ],
  };
  const chartSeries = rows.filter((row) => !row.error);
  return {
    tables: [table, oursTable],
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
    if (!seen.has(contender.label)) seen.set(contender.label, contender.settings);
  }
  return [...seen].map(([name, settings]) => `${name}: ${settings}.`);
}
