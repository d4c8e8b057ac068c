import { parseArgs } from 'node:util';

/** Command-line options of `bench/run.ts`. */
export interface BenchArgs {
  /** Short windows and fewer cycles: a smoke run of about a minute. */
  readonly quick: boolean;
  /** Node counts to run on; undefined: each scenario's own default. */
  readonly nodes: readonly number[] | undefined;
  /** Scenario ids or numbers to run; undefined: all. */
  readonly scenarios: readonly string[] | undefined;
  /** Where latest.md / latest.svg / latest.json go. */
  readonly out: string;
  /** A commit to compare our engine with (scenario 8); undefined: no comparison. */
  readonly baseline: string | undefined;
  readonly help: boolean;
}

export const USAGE = `Usage: node --expose-gc --import tsx bench/run.ts [options]

  --quick                 short windows (about a minute in all)
  --nodes 1,3,5           node counts (default: each scenario's own)
  --scenarios a,b         scenario ids or numbers (default: all), e.g. uncontended,2
  --out DIR               results folder (default: bench/results)
  --baseline REF          also run scenario 8: our engine against its own lib/engine at
                          commit REF (paired rounds), e.g. --baseline v0.1.0
  --help                  this text`;

/** A command line `bench/run.ts` cannot run: the message says what to change. */
export class BenchArgsError extends Error {
  override readonly name = 'BenchArgsError';
}

const OPTIONS = {
  quick: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
  nodes: { type: 'string' },
  scenarios: { type: 'string' },
  out: { type: 'string' },
  baseline: { type: 'string' },
} as const;

function list(flag: string, value: string): string[] {
  const parts = value
    .split(',')
    .map((part) => part.trim())
    .filter(Boolean);
  if (parts.length === 0) {
    throw new BenchArgsError(`${flag} needs a comma-separated list, e.g. ${flag} 1,3,5`);
  }
  return parts;
}

function nodeCounts(value: string): number[] {
  return list('--nodes', value).map((part) => {
    const n = Number(part);
    if (!Number.isInteger(n) || n < 1 || n > 9) {
      throw new BenchArgsError(`--nodes takes whole numbers from 1 to 9 (got '${part}')`);
    }
    return n;
  });
}

/** The options as given; a command line Node cannot parse is a BenchArgsError. */
function optionValues(argv: readonly string[]) {
  try {
    return parseArgs({ args: [...argv], options: OPTIONS, strict: true }).values;
  } catch (error) {
    // Unknown options, stray arguments, a list or folder left out: Node's message, then the usage.
    throw new BenchArgsError(`${(error as Error).message}\n\n${USAGE}`);
  }
}

export function parseBenchArgs(argv: readonly string[], defaultOut: string): BenchArgs {
  const values = optionValues(argv);
  if (values.out === '') throw new BenchArgsError('--out needs a folder');
  if (values.baseline === '')
    throw new BenchArgsError('--baseline needs a commit, e.g. --baseline main');
  return {
    quick: values.quick ?? false,
    help: values.help ?? false,
    nodes: values.nodes === undefined ? undefined : nodeCounts(values.nodes),
    scenarios: values.scenarios === undefined ? undefined : list('--scenarios', values.scenarios),
    out: values.out ?? defaultOut,
    baseline: values.baseline,
  };
}
