/** Number formatting for the tables (durations and counts: dev/text.ts). */

export function formatRate(value: number): string {
  if (!Number.isFinite(value)) return 'n/a';
  return Math.round(value).toLocaleString('en-US');
}

/** `value / base` as `0.95×`; empty when either side is missing. */
export function formatRatio(value: number, base: number | undefined): string {
  if (base === undefined || !Number.isFinite(value) || !Number.isFinite(base) || base === 0) {
    return '–';
  }
  return `${(value / base).toFixed(2)}×`;
}

export function formatBytes(bytes: number): string {
  if (!Number.isFinite(bytes)) return 'n/a';
  const abs = Math.abs(bytes);
  if (abs >= 1024 * 1024) return `${(bytes / 1024 / 1024).toFixed(2)} MB`;
  if (abs >= 1024) return `${(bytes / 1024).toFixed(1)} KB`;
  return `${Math.round(bytes)} B`;
}

/**
 * The median over rounds of `a[i] / b[i]`, for two contenders measured back
 * to back in every round: a round that ran slow for both (load from outside
 * the bench) cancels out, where best round against best round may compare
 * rounds taken under different conditions. Undefined without a pair.
 */
export function pairedRatio(a: readonly number[], b: readonly number[]): number | undefined {
  const ratios = a
    .slice(0, b.length)
    .map((value, i) => value / b[i])
    .filter((ratio) => Number.isFinite(ratio))
    .sort((x, y) => x - y);
  if (ratios.length === 0) return undefined;
  const mid = ratios.length >> 1;
  return ratios.length % 2 === 1 ? ratios[mid] : (ratios[mid - 1] + ratios[mid]) / 2;
}
