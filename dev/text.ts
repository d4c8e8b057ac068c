/**
 * Figures and tables as the tests, the demo and the bench print them.
 *
 * ```ts
 * textTable([['run', 'ops'], ['quorum', formatCount(12_000)]]);
 * // ['  run        ops', '  quorum  12,000']
 * ```
 */

/** A column's alignment: left or right. */
export type Align = 'l' | 'r';

/** `12,345`. */
export function formatCount(value: number): string {
  return value.toLocaleString('en-US');
}

export interface DurationStyle {
  /** From this many ms on, seconds to a tenth (`1.2 s`). Default: never. */
  readonly secondsFrom?: number;
  /**
   * Below 100 ms, a tenth of a ms from 10 ms on and a hundredth below.
   * Default: true; false rounds to whole ms.
   */
  readonly fractions?: boolean;
}

/**
 * A duration given in ms: `0.42 ms`, `12.5 ms`, `180 ms` (`1.2 s` with
 * `secondsFrom`); `n/a` when not a number.
 */
export function formatMs(value: number, style: DurationStyle = {}): string {
  const { secondsFrom = Infinity, fractions = true } = style;
  if (!Number.isFinite(value)) return 'n/a';
  if (value >= secondsFrom) return `${(value / 1000).toFixed(1)} s`;
  if (!fractions || value >= 100) return `${Math.round(value)} ms`;
  return `${value.toFixed(value >= 10 ? 1 : 2)} ms`;
}

/** Every cell padded to its column's width; columns past the end of `align` are right-aligned. */
function padCells(
  rows: readonly (readonly string[])[],
  align: readonly Align[],
): { cells: string[][]; widths: number[] } {
  const widths = (rows[0] ?? []).map((_, c) => Math.max(...rows.map((row) => row[c].length)));
  const cells = rows.map((row) =>
    row.map((cell, c) =>
      (align[c] ?? 'r') === 'l' ? cell.padEnd(widths[c]) : cell.padStart(widths[c]),
    ),
  );
  return { cells, widths };
}

export interface TextTableOptions {
  /** Default: two spaces. */
  readonly indent?: string;
  /** Default: the first column left-aligned, the others right-aligned. */
  readonly align?: readonly Align[];
}

/** A plain-text table, one string a line, its columns three spaces apart. */
export function textTable(
  rows: readonly (readonly string[])[],
  { indent = '  ', align = ['l'] }: TextTableOptions = {},
): string[] {
  return padCells(rows, align).cells.map((row) => indent + row.join('   ').trimEnd());
}

export interface MarkdownTable {
  readonly headers: readonly string[];
  /** Columns past its end are right-aligned. */
  readonly align: readonly Align[];
  readonly rows: readonly (readonly string[])[];
}

/** A Markdown table, padded so that it lines up as plain text too; a `|` in a cell is escaped. */
export function markdownTable({ headers, align, rows }: MarkdownTable): string {
  const escaped = [headers, ...rows].map((row) => row.map((cell) => cell.replace(/\|/g, '\\|')));
  const { cells, widths } = padCells(escaped, align);
  const rule = widths
    .map((w, c) => ((align[c] ?? 'r') === 'l' ? `:${'-'.repeat(w + 1)}` : `${'-'.repeat(w + 1)}:`))
    .join('|');
  const line = (row: readonly string[]) => `| ${row.join(' | ')} |`;
  return [line(cells[0]), `|${rule}|`, ...cells.slice(1).map(line)].join('\n');
}
