import {
  IN_PROCESS_MUTEX,
  OURS,
  OURS_CONSTANT_RETRY,
  peers,
  type Contender,
} from '../contenders/index.js';
import type { BenchContext } from '../support/bench-context.js';
import { formatMs, formatRate, formatRatio } from '../support/format.js';
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
  readonly result: HandoffResult | undefined;
  readonly error: string | undefined;
}

function contenders(): Contender[] {
  return [
    IN_PROCESS_MUTEX,
    ...peers(false).filter((peer) => peer.canWait),
    OURS_CONSTANT_RETRY,
    OURS,
  ];
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
    for (const count of context.nodeCounts(this.defaultNodes)) {
      for (const contender of contenders()) {
        await context.reset();
        try {
          const result = await context.withSession(
            contender,
            count,
            { mode: 'wait', ttl: TTL },
            (s) =>
              handoffLoad(s, {
                workers: WORKERS,
                holdMs: HOLD_MS,
                workMs: WORK_MS,
                warmupMs,
                measureMs,
                key: `hot:${contender.id}`,
              }),
          );
          context.log(
            `  ${count} node(s)  ${contender.label.padEnd(34)} ${formatRate(result.rate).padStart(6)} grants/s  p99 wait ${formatMs(result.wait.p99)}  max ${formatMs(result.wait.max)}  Jain ${result.fairness.toFixed(2)}` +
              (result.failures ? `  failures ${result.failures}` : '') +
              (result.overlaps ? `  OVERLAPS ${result.overlaps}` : ''),
          );
          rows.push({ contender, nodes: count, result, error: undefined });
        } catch (error) {
          context.log(`  ${count} node(s)  ${contender.label}: FAILED ${(error as Error).message}`);
          rows.push({
            contender,
            nodes: count,
            result: undefined,
            error: (error as Error).message,
          });
        }
      }
    }
    return report(rows);
  },
};

function report(rows: readonly HandoffRow[]): ScenarioResult {
  const counts = [...new Set(rows.map((row) => row.nodes))];
  const bestPeer = new Map<number, number>();
  const ceiling = new Map<number, number>();
  for (const row of rows) {
    if (row.contender.kind === 'peer' && row.result) {
      bestPeer.set(row.nodes, Math.max(bestPeer.get(row.nodes) ?? 0, row.result.rate));
    }
    if (row.contender.kind === 'floor' && row.result) ceiling.set(row.nodes, row.result.rate);
  }
  const table: ReportTable = {
    title: 'Hand-off on one hot key',
    headers: [
      'nodes',
      'library',
      'grants/s',
      '× best peer',
      '× ceiling',
      'wait p50',
      'wait p99',
      'wait max',
      'fairness (Jain)',
      'failed / overlaps',
    ],
    align: ['r', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
    rows: rows.map((row) => {
      const r = row.result;
      if (!r)
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
        ];
      return [
        String(row.nodes),
        row.contender.kind === 'ours' ? `**${row.contender.label}**` : row.contender.label,
        formatRate(r.rate),
        formatRatio(r.rate, bestPeer.get(row.nodes)),
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
      '"failed": acquisitions that gave up (none expected: retry budgets are unbounded); "overlaps": grants while another worker still held the lock (must be 0).',
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
