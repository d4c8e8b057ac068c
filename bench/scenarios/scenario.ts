import type { Align } from '../../dev/text.js';
import type { BenchContext } from '../support/bench-context.js';

/** One Markdown table with the notes printed under it. */
export interface ReportTable {
  readonly title: string;
  readonly headers: readonly string[];
  readonly align: readonly Align[];
  readonly rows: readonly (readonly string[])[];
  readonly notes: readonly string[];
}

/** Bars grouped by node count, one bar per contender. */
export interface ChartPanel {
  readonly title: string;
  readonly unit: string;
  readonly groups: readonly {
    readonly label: string;
    readonly bars: readonly { readonly series: string; readonly value: number }[];
  }[];
}

export interface ScenarioResult {
  readonly tables: readonly ReportTable[];
  readonly charts: readonly ChartPanel[];
  /** Raw figures for latest.json. */
  readonly data: unknown;
}

/** A benchmark scenario, registered in bench/run.ts. */
export interface Scenario {
  /** Its number in the design (1 uncontended, 2 hand-off, ...). */
  readonly number: number;
  /** Name used by --scenarios. */
  readonly id: string;
  readonly title: string;
  /** What it measures and how, for the report. */
  readonly description: string;
  /** Node counts when --nodes is not given. */
  readonly defaultNodes: readonly number[];
  run(context: BenchContext): Promise<ScenarioResult>;
}
