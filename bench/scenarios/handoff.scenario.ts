import {
  IN_PROCESS_MUTEX,
  OURS,
  OURS_ENGINE_PER_WORKER,
  peersBothWays,
  type Contender,
  type PeerConfig,
} from '../contenders/index.js';
import { HEADLINES, type Headlines, type HandoffFigures } from '../report/targets.js';
import type { BenchContext } from '../support/bench-context.js';
import { formatMs } from '../../dev/text.js';
import { formatRate, formatRatio } from '../support/format.js';
import { handoffInProcesses } from '../support/handoff-processes.js';
import { handoffLoad, type HandoffResult } from '../support/lock-load.js';
import type { ReportTable, Scenario, ScenarioResult } from './scenario.js';
import { uniqueSettings } from './uncontended.scenario.js';

const WORKERS = 8;
const HOLD_MS = 1;
const WORK_MS = 2;
const TTL = 10_000;

interface HandoffRow {
  readonly contender: Contender;
  readonly nodes: number;
  /** Each worker in a process of its own (one session each), not all in the bench's. */
  readonly processes: boolean;
  readonly result: HandoffResult | undefined;
  readonly error: string | undefined;
}

function contenders(): Contender[] {
  return [
    IN_PROCESS_MUTEX,
    ...peersBothWays().filter((peer) => peer.canWait),
    OURS,
    OURS_ENGINE_PER_WORKER,
  ];
}

/** The contenders run with a process per worker: the peers both ways, and our engine. */
function processContenders(): Contender[] {
  return [...peersBothWays().filter((peer) => peer.canWait), OURS];
}

/** A row's name: the library, and where its workers ran when not in the bench's process. */
const rowLabel = (row: Pick<HandoffRow, 'contender' | 'processes'>) =>
  row.processes ? `${row.contender.label}, ${WORKERS} processes` : row.contender.label;

/**
 * Per node count, the peers of one configuration, in one process or with a
 * process per worker: highest grants/s, and lowest p99 wait.
 */
function bestPeers(
  rows: readonly HandoffRow[],
  config: PeerConfig,
  processes = false,
): Map<number, { rate: number; rateLabel: string; p99: number; p99Label: string }> {
  const best = new Map<
    number,
    { rate: number; rateLabel: string; p99: number; p99Label: string }
  >();
  for (const row of rows) {
    const r = row.result;
    if (row.contender.kind !== 'peer' || row.contender.config !== config || !r) continue;
    if (row.processes !== processes) continue;
    const current = best.get(row.nodes) ?? {
      rate: -Infinity,
      rateLabel: '',
      p99: Infinity,
      p99Label: '',
    };
    if (r.rate > current.rate) {
      current.rate = r.rate;
      current.rateLabel = rowLabel(row);
    }
    if (r.wait.p99 < current.p99) {
      current.p99 = r.wait.p99;
      current.p99Label = rowLabel(row);
    }
    best.set(row.nodes, current);
  }
  return best;
}

export const handoffScenario: Scenario = {
  number: 2,
  id: 'handoff',
  title: 'Hand-off on one hot key',
  description:
    `${WORKERS} workers on one key; each asks for the lock (waiting with the library's own retry), holds it ${HOLD_MS} ms, ` +
    `releases, works ${WORK_MS} ms unlocked, asks again. Grants/s, wait from asking to getting (HDR histogram), ` +
    "and Jain's fairness index over the workers' grant counts (1 = equal shares).",
  defaultNodes: [1, 3],
  async run(context: BenchContext): Promise<ScenarioResult> {
    const rows: HandoffRow[] = [];
    const { handoffWarmupMs: warmupMs, handoffMeasureMs: measureMs } = context.timing;
    const options = (count: number, contender: Contender) => ({
      workers: WORKERS,
      holdMs: HOLD_MS,
      workMs: WORK_MS,
      warmupMs,
      measureMs,
      key: `hot:${contender.id}:${count}`,
    });
    const measure = async (
      contender: Contender,
      count: number,
      processes: boolean,
      load: () => Promise<HandoffResult>,
    ) => {
      await context.reset();
      const row = { contender, nodes: count, processes };
      try {
        const result = await load();
        context.log(
          `  ${count} node(s)  ${rowLabel(row).padEnd(46)} ${formatRate(result.rate).padStart(6)} grants/s  p99 wait ${formatMs(result.wait.p99)}  max ${formatMs(result.wait.max)}  Jain ${result.fairness.toFixed(2)}` +
            (result.failures ? `  failures ${result.failures}` : '') +
            (result.overlaps ? `  OVERLAPS ${result.overlaps}` : ''),
        );
        rows.push({ ...row, result, error: undefined });
      } catch (error) {
        context.log(`  ${count} node(s)  ${rowLabel(row)}: FAILED ${(error as Error).message}`);
        rows.push({ ...row, result: undefined, error: (error as Error).message });
      }
    };
    for (const count of context.nodeCounts(this.defaultNodes)) {
      for (const contender of contenders()) {
        await measure(contender, count, false, () =>
          context.withSession(contender, count, { mode: 'wait', ttl: TTL }, (s) =>
            handoffLoad(s, options(count, contender)),
          ),
        );
      }
      for (const contender of processContenders()) {
        await measure(contender, count, true, () =>
          handoffInProcesses(
            contender.id,
            context.urls(count),
            TTL,
            options(count, contender),
            (pid, exiting) => (exiting ? context.childExiting(pid) : context.childStarted(pid)),
          ),
        );
      }
    }
    const headlines = (context.shared.get(HEADLINES) ?? {}) as Headlines;
    const bestDefaults = bestPeers(rows, 'defaults');
    const bestTuned = bestPeers(rows, 'tuned');
    const bestProcesses = [bestPeers(rows, 'defaults', true), bestPeers(rows, 'tuned', true)];
    const figures = (id: string, n: number, processes = false): HandoffFigures | undefined => {
      const r = rows.find(
        (row) => row.contender.id === id && row.nodes === n && row.processes === processes,
      )?.result;
      return r && { rate: r.rate, p99: r.wait.p99, fairness: r.fairness };
    };
    headlines.handoff = [...new Set(rows.map((row) => row.nodes))].map((n) => ({
      nodes: n,
      ours: figures(OURS.id, n),
      oursEngines: figures(OURS_ENGINE_PER_WORKER.id, n),
      oursProcesses: figures(OURS.id, n, true),
      bestProcesses: bestProcesses
        .map((best) => best.get(n))
        .reduce((a, b) => (!a || (b && b.rate > a.rate) ? b : a), undefined),
      mutex: figures(IN_PROCESS_MUTEX.id, n),
      bestDefaults: bestDefaults.get(n),
      bestTuned: bestTuned.get(n),
    }));
    context.shared.set(HEADLINES, headlines);
    return report(rows);
  },
};

function report(rows: readonly HandoffRow[]): ScenarioResult {
  const counts = [...new Set(rows.map((row) => row.nodes))];
  const bestDefaults = bestPeers(rows, 'defaults');
  const bestTuned = bestPeers(rows, 'tuned');
  // A row with a process per worker is compared with the peers run the same way.
  const best = (row: HandoffRow, config: PeerConfig) =>
    (row.processes
      ? bestPeers(rows, config, true)
      : config === 'defaults'
        ? bestDefaults
        : bestTuned
    ).get(row.nodes);
  const ceiling = new Map<number, number>();
  for (const row of rows) {
    if (row.contender.kind === 'floor' && row.result) ceiling.set(row.nodes, row.result.rate);
  }
  const table: ReportTable = {
    title: 'Hand-off on one hot key',
    headers: [
      'nodes',
      'library',
      'grants/s',
      '× best peer, defaults',
      '× best peer, tuned',
      '× ceiling',
      'wait p50',
      'wait p99',
      'wait max',
      'fairness (Jain)',
      'failed / overlaps',
    ],
    align: ['r', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
    rows: rows.map((row) => {
      const r = row.result;
      if (!r)
        return [
          String(row.nodes),
          rowLabel(row),
          `failed: ${row.error}`,
          ...new Array<string>(8).fill(''),
        ];
      return [
        String(row.nodes),
        row.contender.kind === 'ours' ? `**${rowLabel(row)}**` : rowLabel(row),
        formatRate(r.rate),
        formatRatio(r.rate, best(row, 'defaults')?.rate),
        formatRatio(r.rate, best(row, 'tuned')?.rate),
        formatRatio(r.rate, ceiling.get(row.nodes)),
        formatMs(r.wait.p50),
        formatMs(r.wait.p99),
        formatMs(r.wait.max),
        r.fairness.toFixed(2),
        `${r.failures} / ${r.overlaps}`,
      ];
    }),
    notes: [
      `The ceiling is an in-process FIFO mutex under the same load: the lock is never idle while someone waits, so it grants about once per ${HOLD_MS} ms hold (a 1 ms timer lasts a little longer). ` +
        `Demand is ${WORKERS} workers × one request per ≥${HOLD_MS + WORK_MS} ms, so every Redis library below it loses grants to polling: a waiter sleeps its retry delay while the lock sits free.`,
      '"failed": acquisitions that gave up: with their defaults redlock (10 retries of ~200 ms) and redlock-universal (3 retries) give up after a few hundred ms to ~2 s; the worker then asks again at once, and its wait counts from its first ask. "overlaps": grants while another worker still held the lock (must be 0).',
      `Best peers, defaults: ${counts.map((n) => `${n} node(s): ${bestDefaults.get(n)?.rateLabel ?? '–'} (grants/s), ${bestDefaults.get(n)?.p99Label ?? '–'} (p99 wait)`).join('; ')}. ` +
        `Tuned: ${counts.map((n) => `${n} node(s): ${bestTuned.get(n)?.rateLabel ?? '–'} (grants/s), ${bestTuned.get(n)?.p99Label ?? '–'} (p99 wait)`).join('; ')}.`,
      'Our engine queues the waiters of one process first come first served and hands a release to the head at once ("ours (LockEngine)": all 8 workers share one engine). "ours, one engine per worker" gives each worker its own engine, connections and queue, as 8 processes would have, but all in the bench\'s process: there a release reaches the others only as the release script\'s pub/sub message.',
      `Rows marked "${WORKERS} processes" run each worker in a process of its own (forked from the bench, one session each: one engine, or one peer's client set), as a service's instances would, started together once every process has its session open; their "× best peer" columns compare with the peers run the same way. Their holds are timed on the machine's monotonic clock, which every process shares, so overlaps count between processes too.`,
      ...uniqueSettings(rows),
    ],
  };
  return {
    tables: [table],
    charts: [
      {
        title: `Hand-off grants/s (${WORKERS} workers, hold ${HOLD_MS} ms, work ${WORK_MS} ms)`,
        unit: 'grants/s',
        groups: counts.map((n) => ({
          label: `${n} node${n > 1 ? 's' : ''}`,
          bars: rows
            .filter((row) => row.nodes === n && row.result)
            .map((row) => ({ series: row.contender.label, value: row.result?.rate ?? 0 })),
        })),
      },
    ],
    data: rows.map((row) => ({
      id: row.contender.id,
      label: row.contender.label,
      nodes: row.nodes,
      error: row.error,
      ...row.result,
    })),
  };
}
