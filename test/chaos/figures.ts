/**
 * The figures of the chaos runs: one table per spec file, printed in its
 * afterAll, and the totals per build over both spec files, printed by the
 * one that ends last when Jest ran both (they usually run in two workers, so
 * they meet in a temp dir named after the Jest process).
 */
import {
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { formatCount, markdownTable } from '../../dev/text.js';
import type { CheckResult } from './checker.js';
import type { WallClockStep } from './history.js';

/** The spec files that report figures; the totals wait for all of them. */
const SPEC_FILES = ['chaos-faults', 'chaos-run'] as const;
type SpecFile = (typeof SPEC_FILES)[number];

export interface FigureRow {
  readonly run: string;
  /** The engine build, and how it was used when that is what the run is about. */
  readonly build: string;
  readonly operations: number;
  readonly grants: number;
  readonly faults: number;
  readonly refusedWrites: number;
  readonly lostControlUpdates: number;
  readonly violations: number;
  /** Findings a stated assumption allows and fencing covered (overlaps under a clock step). */
  readonly expected: number;
  /** Steps of the host's wall clock during the run, in ms. */
  readonly wallClockSteps: readonly number[];
  readonly seconds: number;
}

export function figureRow(
  run: string,
  build: string,
  result: CheckResult,
  seconds: number,
  wallClockSteps: readonly WallClockStep[] = [],
): FigureRow {
  return {
    run,
    build,
    operations: result.operations,
    grants: result.grants,
    faults: result.faults,
    refusedWrites: result.refusedWrites,
    lostControlUpdates: result.lostControlUpdates,
    violations: result.violations.length,
    expected: result.expected.length,
    wallClockSteps: wallClockSteps.map((s) => Math.round(s.ms)),
    seconds,
  };
}

function runTable(rows: readonly FigureRow[]): string {
  return markdownTable({
    headers: [
      'run',
      'build',
      'ops',
      'grants',
      'faults',
      'refused',
      'lost ctl',
      'violations',
      'expected',
      'wall steps',
      's',
    ],
    rows: rows.map((f) => [
      f.run,
      f.build,
      formatCount(f.operations),
      formatCount(f.grants),
      formatCount(f.faults),
      formatCount(f.refusedWrites),
      formatCount(f.lostControlUpdates),
      formatCount(f.violations),
      formatCount(f.expected),
      steps(f.wallClockSteps),
      f.seconds.toFixed(1),
    ]),
    align: ['l', 'l'],
  });
}

/** The host's wall-clock steps, e.g. `none` or `+35, -12 ms`. */
const steps = (ms: readonly number[]) =>
  ms.length > 0 ? `${ms.map((m) => (m > 0 ? `+${m}` : String(m))).join(', ')} ms` : 'none';

/** Runs, operations, faults, violations and seconds per build. */
function buildTable(rows: readonly FigureRow[]): string {
  const builds = new Map<string, FigureRow[]>();
  for (const row of rows) builds.set(row.build, [...(builds.get(row.build) ?? []), row]);
  const sum = (list: readonly FigureRow[], pick: (r: FigureRow) => number) =>
    list.reduce((total, r) => total + pick(r), 0);
  return markdownTable({
    headers: ['build', 'runs', 'operations', 'faults', 'violations', 'expected', 'wall steps', 's'],
    rows: [...builds].map(([build, list]) => [
      build,
      formatCount(list.length),
      formatCount(sum(list, (r) => r.operations)),
      formatCount(sum(list, (r) => r.faults)),
      formatCount(sum(list, (r) => r.violations)),
      formatCount(sum(list, (r) => r.expected)),
      formatCount(sum(list, (r) => r.wallClockSteps.length)),
      sum(list, (r) => r.seconds).toFixed(1),
    ]),
    align: ['l'],
  });
}

/** The Jest process this file runs for: the parent of a worker, or this process when in band. */
const jestRun = () => (process.send ? process.ppid : process.pid);

function sharedDir(): string {
  const prefix = 'nestjs-redis-lock-chaos-';
  // Left behind by runs that did not include both files.
  for (const name of readdirSync(tmpdir())) {
    if (!name.startsWith(prefix)) continue;
    const path = join(tmpdir(), name);
    // The other spec file of this run may remove its own directory at this very moment.
    const modified = statSync(path, { throwIfNoEntry: false })?.mtimeMs;
    if (modified !== undefined && Date.now() - modified > 3_600_000)
      rmSync(path, { recursive: true, force: true });
  }
  return join(tmpdir(), `${prefix}${jestRun()}`);
}

/**
 * Prints this spec file's figures and, when every chaos spec file of this
 * Jest run has reported, the totals per build.
 */
export function reportFigures(file: SpecFile, title: string, rows: readonly FigureRow[]): void {
  if (rows.length === 0) return;
  const out = [title, runTable(rows), '', buildTable(rows)];
  const dir = sharedDir();
  mkdirSync(dir, { recursive: true });
  // Written whole, then renamed: the other file never reads half of it.
  writeFileSync(join(dir, `${file}.json.tmp`), JSON.stringify(rows));
  renameSync(join(dir, `${file}.json.tmp`), join(dir, `${file}.json`));
  try {
    const all = SPEC_FILES.flatMap(
      (f) => JSON.parse(readFileSync(join(dir, `${f}.json`), 'utf8')) as FigureRow[],
    );
    const sum = (pick: (r: FigureRow) => number) => all.reduce((total, r) => total + pick(r), 0);
    out.push(
      '',
      `chaos suite, both spec files: ${formatCount(all.length)} runs, ${formatCount(sum((r) => r.operations))} ` +
        `operations, ${formatCount(sum((r) => r.faults))} faults injected, ${sum((r) => r.seconds).toFixed(1)} s of runs`,
      buildTable(all),
    );
    rmSync(dir, { recursive: true, force: true });
  } catch {
    // The other spec file has not reported (yet): it prints the totals, or this run has no other.
  }
  console.log(out.join('\n'));
}
