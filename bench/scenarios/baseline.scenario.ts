import { OURS, oursContender, type Contender } from '../contenders/index.js';
import { HEADLINES, type Headlines } from '../report/targets.js';
import type { BenchContext } from '../support/bench-context.js';
import { engineAt } from '../support/compiled-engine.js';
import { formatMs } from '../../dev/text.js';
import { formatRate, formatRatio, pairedRatio } from '../support/format.js';
import { PLAIN_LOOP_CALLERS } from './plain-loop.scenario.js';
import type { ReportTable, Scenario, ScenarioResult } from './scenario.js';
import { measureUncontended, median, TTL, type UncontendedRow } from './uncontended.scenario.js';

/**
 * Rounds per cell, as a multiple of the run's rounds: two contenders only,
 * so more rounds cost little, and a change of a few per cent needs them to
 * stand out of the round-to-round noise.
 */
const ROUNDS_FACTOR = 2;

interface Cell {
  readonly callers: number;
  readonly nodes: number;
  readonly now: UncontendedRow;
  readonly then: UncontendedRow;
}

/** How the working tree's rate compares with the baseline's in one cell. */
interface Verdict {
  /** Median over rounds of now / then, each pair measured back to back. */
  readonly paired: number | undefined;
  /** Lowest and highest per-round ratio. */
  readonly low: number;
  readonly high: number;
  readonly text: string;
}

function perRound(now: readonly number[], then: readonly number[]): number[] {
  return now
    .slice(0, then.length)
    .map((rate, i) => rate / then[i])
    .filter(Number.isFinite);
}

/**
 * Faster or slower only when every round says so; otherwise the difference
 * is within the noise the rounds show.
 */
function verdict(cell: Cell): Verdict {
  const ratios = perRound(cell.now.rates, cell.then.rates);
  const paired = pairedRatio(cell.now.rates, cell.then.rates);
  const low = Math.min(...ratios);
  const high = Math.max(...ratios);
  let text = 'within noise';
  if (ratios.length === 0) text = 'not measured';
  else if (low > 1) text = 'faster in every round';
  else if (high < 1) text = 'slower in every round';
  return { paired, low, high, text };
}

export const baselineScenario: Scenario = {
  number: 8,
  id: 'baseline',
  title: 'Our engine against an earlier commit of it',
  description:
    "The plain loop of scenario 7 (1, 4 and 32 async callers, `tryAcquire` then `release` on a fresh key per cycle) for the working tree's engine and for the engine of the commit given with `--baseline`, both compiled the same way, on the same nodes. " +
    'Interleaved rounds, twice as many as the other scenarios run, the order reversed each round; the verdict compares the two in each round, since the two runs of a round meet the same machine.',
  defaultNodes: [1, 3, 5],
  async run(context: BenchContext): Promise<ScenarioResult> {
    const ref = context.baseline;
    if (!ref) {
      throw new Error(
        'scenario 8 compares with an earlier commit: give it with --baseline <commit>',
      );
    }
    const { commit } = await engineAt(ref);
    const then: Contender = oursContender({
      id: `ours-${commit}`,
      label: `ours at ${commit}`,
      load: async () => (await engineAt(ref)).engine,
      settings: `the engine of commit ${commit} (--baseline ${ref}), defaults`,
    });
    const now: Contender = { ...OURS, label: 'ours (working tree)' };
    const rounds = context.timing.rounds * ROUNDS_FACTOR;
    const cells: Cell[] = [];
    for (const callers of PLAIN_LOOP_CALLERS) {
      for (const nodes of context.nodeCounts(this.defaultNodes)) {
        const [a, b] = await measureUncontended(context, [now, then], nodes, {
          callers,
          timed: 'cycle',
          keyPrefix: `base:${callers}`,
          rounds,
        });
        cells.push({ callers, nodes, now: a, then: b });
      }
    }
    const headlines = (context.shared.get(HEADLINES) ?? {}) as Headlines;
    headlines.baseline = cells.map((cell) => {
      const { paired, low, high } = verdict(cell);
      return { commit, callers: cell.callers, nodes: cell.nodes, paired, low, high };
    });
    context.shared.set(HEADLINES, headlines);
    return report(cells, commit);
  },
};

function report(cells: readonly Cell[], commit: string): ScenarioResult {
  const verdicts = cells.map(verdict);
  const table: ReportTable = {
    title: `Working tree against ${commit}`,
    headers: [
      'callers',
      'nodes',
      'now cycles/s',
      `${commit} cycles/s`,
      'now / then',
      'median of per-round ratios',
      'per-round range',
      'cycle p50: now',
      'then',
      'verdict',
    ],
    align: ['r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'l'],
    rows: cells.map((cell, i) => {
      const v = verdicts[i];
      const failed = cell.now.error ?? cell.then.error;
      if (failed)
        return [
          String(cell.callers),
          String(cell.nodes),
          `failed: ${failed}`,
          ...new Array<string>(7).fill(''),
        ];
      return [
        String(cell.callers),
        String(cell.nodes),
        formatRate(median(cell.now.rates)),
        formatRate(median(cell.then.rates)),
        formatRatio(median(cell.now.rates), median(cell.then.rates)),
        v.paired === undefined ? '–' : `**${v.paired.toFixed(2)}×**`,
        `${v.low.toFixed(2)}–${v.high.toFixed(2)}×`,
        formatMs(cell.now.latency.p50),
        formatMs(cell.then.latency.p50),
        v.text,
      ];
    }),
    notes: [
      `Lease (ttl) ${TTL / 1000} s; rates are median rounds; both engines with their defaults (fencing on, clients of their own).`,
      '"within noise": some rounds had the working tree ahead and some behind; a change that shows in every round is named.',
    ],
  };
  return {
    tables: [table],
    charts: [],
    data: cells.map((cell, i) => ({
      callers: cell.callers,
      nodes: cell.nodes,
      baseline: commit,
      now: cell.now.rates,
      then: cell.then.rates,
      ...verdicts[i],
    })),
  };
}
