import { createHistogram, type RecordableHistogram } from 'node:perf_hooks';

/** Percentiles in milliseconds. */
export interface LatencySummary {
  readonly count: number;
  readonly p50: number;
  readonly p99: number;
  readonly max: number;
}

/** A latency recorder: microsecond resolution, HDR histogram from node:perf_hooks. */
export class LatencyRecorder {
  private readonly histogram: RecordableHistogram = createHistogram({
    lowest: 1,
    highest: 120_000_000,
    figures: 3,
  });

  /** Records a duration given in milliseconds (performance.now() deltas). */
  record(ms: number): void {
    this.histogram.record(Math.max(1, Math.round(ms * 1000)));
  }

  summary(): LatencySummary {
    const h = this.histogram;
    if (h.count === 0) return { count: 0, p50: NaN, p99: NaN, max: NaN };
    return {
      count: h.count,
      p50: h.percentile(50) / 1000,
      p99: h.percentile(99) / 1000,
      max: h.max / 1000,
    };
  }
}

/**
 * Jain's fairness index over per-worker counts: 1 when every worker got the
 * same share, 1/n when one worker got everything.
 */
export function jainIndex(counts: readonly number[]): number {
  const sum = counts.reduce((a, b) => a + b, 0);
  const squares = counts.reduce((a, b) => a + b * b, 0);
  return squares === 0 ? NaN : (sum * sum) / (counts.length * squares);
}
