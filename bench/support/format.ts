/** Number formatting for the tables. */

export function formatRate(value: number): string {
  if (!Number.isFinite(value)) return 'n/a';
  return Math.round(value).toLocaleString('en-US');
}

export function formatMs(value: number): string {
  if (!Number.isFinite(value)) return 'n/a';
  if (value >= 100) return `${Math.round(value)} ms`;
  if (value >= 10) return `${value.toFixed(1)} ms`;
  return `${value.toFixed(2)} ms`;
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

export function formatCount(value: number): string {
  return value.toLocaleString('en-US');
}
