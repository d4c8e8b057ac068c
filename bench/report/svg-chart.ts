import type { ChartPanel } from '../scenarios/scenario.js';

/**
 * A grouped bar chart as a standalone SVG, written by hand: one panel per
 * ChartPanel (groups = node counts, one bar per library), one shared legend.
 */

const WIDTH = 1000;
const MARGIN = { left: 72, right: 24, top: 44, bottom: 34 };
const PLOT_HEIGHT = 250;
const LEGEND_ROW = 20;
const LEGEND_COLUMNS = 3;

/** Per library a dark shade (plain clients) and a light one (+AP: auto-pipelining clients). */
const HUES: readonly (readonly [string, string])[] = [
  ['#1f77b4', '#aec7e8'],
  ['#ff7f0e', '#ffbb78'],
  ['#2ca02c', '#98df8a'],
  ['#9467bd', '#c5b0d5'],
  ['#17becf', '#9edae5'],
  ['#8c564b', '#c49c94'],
];
const FLOOR: readonly [string, string] = ['#7f7f7f', '#c7c7c7'];
const CEILING = '#404040';
const OURS_MAIN = '#d62728';
const OURS_OTHERS = ['#ff9896', '#8c1c13', '#f4a582'];
const AP_SUFFIX = ' +AP';

function escapeXml(text: string): string {
  return text.replace(/[<>&"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function short(value: number): string {
  if (value >= 10_000) return `${(value / 1000).toFixed(1)}k`;
  if (value >= 1000) return `${(value / 1000).toFixed(2)}k`;
  return String(Math.round(value));
}

function niceStep(max: number, ticks: number): number {
  const raw = max / ticks;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const residual = raw / magnitude;
  const nice = residual > 5 ? 10 : residual > 2.5 ? 5 : residual > 2 ? 2.5 : residual > 1 ? 2 : 1;
  return nice * magnitude;
}

/**
 * Colours by series: our engine in reds (its default set-up the strongest),
 * the raw floors and the in-process ceiling in greys, each peer in a hue of
 * its own, light for its +AP (tuned) run.
 */
function colours(series: readonly string[]): Map<string, string> {
  const map = new Map<string, string>();
  const hueOf = new Map<string, readonly [string, string]>();
  let ours = 0;
  for (const name of series) {
    const plus = name.endsWith(AP_SUFFIX);
    // A peer's two configurations (" · defaults", " · tuned +AP") share its hue.
    const base = name.replace(/ · (defaults|tuned \+AP)$/, '').replace(/ \+AP$/, '');
    if (name.startsWith('ours')) {
      map.set(
        name,
        name.includes('LockEngine') ? OURS_MAIN : OURS_OTHERS[ours++ % OURS_OTHERS.length],
      );
      continue;
    }
    if (name.startsWith('in-process')) {
      map.set(name, CEILING);
      continue;
    }
    let hue = base.startsWith('raw') ? FLOOR : hueOf.get(base);
    if (!hue) {
      hue = HUES[hueOf.size % HUES.length];
      hueOf.set(base, hue);
    }
    map.set(name, hue[plus ? 1 : 0]);
  }
  return map;
}

function panelSvg(panel: ChartPanel, top: number, colour: Map<string, string>): string {
  const plotWidth = WIDTH - MARGIN.left - MARGIN.right;
  const y0 = top + MARGIN.top;
  const values = panel.groups.flatMap((g) => g.bars.map((b) => b.value));
  // Head-room above the tallest bar for its rotated value label.
  const highest = Math.max(1, ...values) * 1.12;
  const step = niceStep(highest, 5);
  const yMax = Math.ceil(highest / step) * step;
  const y = (v: number) => y0 + PLOT_HEIGHT - (v / yMax) * PLOT_HEIGHT;
  const out: string[] = [];
  out.push(
    `<text x="${MARGIN.left}" y="${top + 22}" class="title">${escapeXml(panel.title)}</text>`,
  );
  for (let v = 0; v <= yMax + step / 2; v += step) {
    const yy = y(v).toFixed(1);
    out.push(
      `<line x1="${MARGIN.left}" x2="${WIDTH - MARGIN.right}" y1="${yy}" y2="${yy}" class="grid"/>`,
      `<text x="${MARGIN.left - 6}" y="${yy}" dy="4" class="tick" text-anchor="end">${short(v)}</text>`,
    );
  }
  out.push(
    `<text transform="translate(16 ${y0 + PLOT_HEIGHT / 2}) rotate(-90)" class="tick" text-anchor="middle">${escapeXml(panel.unit)}</text>`,
  );
  const groupWidth = plotWidth / Math.max(1, panel.groups.length);
  panel.groups.forEach((group, g) => {
    const gx = MARGIN.left + g * groupWidth;
    const barWidth = Math.min(44, (groupWidth * 0.86) / Math.max(1, group.bars.length));
    const inner = barWidth * group.bars.length;
    const start = gx + (groupWidth - inner) / 2;
    group.bars.forEach((bar, b) => {
      const x = start + b * barWidth;
      const barTop = y(bar.value);
      const h = y0 + PLOT_HEIGHT - barTop;
      out.push(
        `<rect x="${(x + 1).toFixed(1)}" y="${barTop.toFixed(1)}" width="${Math.max(1, barWidth - 2).toFixed(1)}" height="${h.toFixed(1)}" fill="${colour.get(bar.series)}"><title>${escapeXml(`${bar.series}, ${group.label}: ${Math.round(bar.value).toLocaleString('en-US')} ${panel.unit}`)}</title></rect>`,
        `<text transform="translate(${(x + barWidth / 2 + 3).toFixed(1)} ${(barTop - 4).toFixed(1)}) rotate(-90)" class="value">${short(bar.value)}</text>`,
      );
    });
    out.push(
      `<text x="${(gx + groupWidth / 2).toFixed(1)}" y="${y0 + PLOT_HEIGHT + 20}" class="group" text-anchor="middle">${escapeXml(group.label)}</text>`,
    );
  });
  out.push(
    `<line x1="${MARGIN.left}" x2="${WIDTH - MARGIN.right}" y1="${y0 + PLOT_HEIGHT}" y2="${y0 + PLOT_HEIGHT}" class="axis"/>`,
  );
  return out.join('\n');
}

export function renderSvg(panels: readonly ChartPanel[], caption: string): string {
  const series = [
    ...new Set(panels.flatMap((p) => p.groups.flatMap((g) => g.bars.map((b) => b.series)))),
  ];
  const colour = colours(series);
  const panelHeight = MARGIN.top + PLOT_HEIGHT + MARGIN.bottom;
  const legendTop = panels.length * panelHeight + 10;
  const legendRows = Math.ceil(series.length / LEGEND_COLUMNS);
  const height = legendTop + legendRows * LEGEND_ROW + 36;
  const body = panels.map((panel, i) => panelSvg(panel, i * panelHeight, colour));
  const columnWidth = (WIDTH - MARGIN.left - MARGIN.right) / LEGEND_COLUMNS;
  const legend = series.map((name, i) => {
    const x = MARGIN.left + (i % LEGEND_COLUMNS) * columnWidth;
    const yy = legendTop + Math.floor(i / LEGEND_COLUMNS) * LEGEND_ROW;
    return (
      `<rect x="${x.toFixed(1)}" y="${yy}" width="12" height="12" fill="${colour.get(name)}"/>` +
      `<text x="${(x + 18).toFixed(1)}" y="${yy + 10}" class="legend">${escapeXml(name)}</text>`
    );
  });
  return `<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" viewBox="0 0 ${WIDTH} ${height}" font-family="Helvetica, Arial, sans-serif">
<style>
  .title { font-size: 15px; font-weight: bold; fill: #222; }
  .tick { font-size: 11px; fill: #555; }
  .group { font-size: 13px; fill: #222; }
  .value { font-size: 10px; fill: #333; }
  .legend { font-size: 12px; fill: #222; }
  .caption { font-size: 11px; fill: #666; }
  .grid { stroke: #e5e5e5; stroke-width: 1; }
  .axis { stroke: #444; stroke-width: 1; }
</style>
<rect width="100%" height="100%" fill="#fff"/>
${body.join('\n')}
${legend.join('\n')}
<text x="${MARGIN.left}" y="${height - 12}" class="caption">${escapeXml(caption)}</text>
</svg>
`;
}
