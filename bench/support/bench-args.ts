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
  readonly help: boolean;
}

export const USAGE = `Usage: node --expose-gc --import tsx bench/run.ts [options]

  --quick                 short windows (about a minute in all)
  --nodes 1,3,5           node counts (default: each scenario's own)
  --scenarios a,b         scenario ids or numbers (default: all), e.g. uncontended,2
  --out DIR               results folder (default: bench/results)
  --help                  this text`;

function list(flag: string, value: string | undefined): string[] {
  if (value === undefined || value.startsWith('--')) {
    throw new Error(`${flag} needs a comma-separated list, e.g. ${flag} 1,3,5`);
  }
  return value
    .split(',')
    .map((part) => part.trim())
    .filter(Boolean);
}

export function parseBenchArgs(argv: readonly string[], defaultOut: string): BenchArgs {
  let quick = false;
  let help = false;
  let nodes: number[] | undefined;
  let scenarios: string[] | undefined;
  let out = defaultOut;
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i].split('=', 2) as [string, string | undefined];
    const value = () => inline ?? argv[++i];
    switch (flag) {
      case '--quick':
        quick = true;
        break;
      case '--help':
      case '-h':
        help = true;
        break;
      case '--nodes':
        nodes = list(flag, value()).map((part) => {
          const n = Number(part);
          if (!Number.isInteger(n) || n < 1 || n > 9) {
            throw new Error(`--nodes takes whole numbers from 1 to 9 (got '${part}')`);
          }
          return n;
        });
        break;
      case '--scenarios':
        scenarios = list(flag, value());
        break;
      case '--out': {
        const dir = value();
        if (!dir) throw new Error('--out needs a folder');
        out = dir;
        break;
      }
      default:
        throw new Error(`unknown option '${argv[i]}'\n\n${USAGE}`);
    }
  }
  return { quick, nodes, scenarios, out, help };
}
