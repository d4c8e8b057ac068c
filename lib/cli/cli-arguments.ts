/**
 * The command line: commands, options, help texts, and usage errors that say
 * what to write instead. Parsed with node:util parseArgs in its lenient mode,
 * so every mistake gets a message of ours rather than Node's.
 */
import { parseArgs } from 'node:util';
import { LOCK_DEFAULTS } from '../engine/lock-options.js';

export const BIN = 'nestjs-redis-lock';

/** A mistake in the command line: exit code 2 and one line saying what to write. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

export type CommandName = 'inspect' | 'list' | 'release' | 'reseed' | 'health';

interface CommandSpec {
  /** The positional arguments, as shown in the synopsis. */
  readonly args: string;
  readonly minArgs: number;
  readonly maxArgs: number;
  readonly summary: string;
  /** Options of this command besides the global ones. */
  readonly options: readonly string[];
  readonly details: string;
  readonly examples: readonly string[];
}

export const COMMANDS: Readonly<Record<CommandName, CommandSpec>> = {
  inspect: {
    args: '<resource>',
    minArgs: 1,
    maxArgs: 1,
    summary: 'holder, lease and fence counter of one lock on every node',
    options: [],
    details: `Shows what each node holds for the resource (the lock's value, its remaining
lease and the fence counter, i.e. the last token the node issued: for this
resource, or for any resource where the node has one counter for all, the
default fenceCounter 'node') and the verdict: held (a quorum of nodes holds
the same value), free, or unknown (too few nodes answered to tell). Exit code
0 when held or free, 1 when unknown.`,
    examples: ['inspect order:42', 'inspect order:42 --json'],
  },
  list: {
    args: '[pattern]',
    minArgs: 0,
    maxArgs: 1,
    summary: 'the locks whose resource matches a pattern',
    options: ['limit'],
    details: `Lists the resources with a lock key on any node whose name matches the
pattern (a Redis glob: * ? [abc]; default *), each with its verdict, holder,
lease and fence counter. Exit code 1 when fewer than a quorum of nodes
answered (the list could miss locks).`,
    examples: ["list 'order:*'", "list 'order:*' --limit 20 --json"],
  },
  release: {
    args: '<resource>',
    minArgs: 1,
    maxArgs: 1,
    summary: 'force-release a stuck lock, whoever holds it',
    options: ['yes'],
    details: `Deletes the lock key of the resource on every node and wakes its waiters.
The holder is not told and may go on writing: its fencing token keeps its
late writes out. Shows the lock and asks for confirmation first, unless
--yes; without a terminal to ask on, --yes is required. Exit code 1 when no
node held the lock (nothing released), when it was declined, or when fewer
than a quorum of nodes answered.`,
    examples: ['release order:42', 'release order:42 --yes'],
  },
  reseed: {
    args: '[pattern]',
    minArgs: 0,
    maxArgs: 1,
    summary: 'raise the fence counters of a node that lost its data',
    options: [],
    details: `Raises every fence counter (of the resources matching the pattern; default
*) on every node to the highest value any node has for it, and each node's
own counter (fenceCounter 'node', the default) likewise, and prints how
many counters it raised per node. Run it after a node lost its data, before
it serves locks again; with fenceCounterTtl 0 that is required. Every node
must answer (exit code 1 otherwise; run it again once they do). Pass the
app's fenceCounterTtl with --fence-counter-ttl: the raised counters of
resources get that lifetime (a node's own counter never expires). Counters
are only ever raised, so running it twice is harmless.`,
    examples: ['reseed --fence-counter-ttl 0', "reseed 'order:*' --fence-counter-ttl 0 --json"],
  },
  health: {
    args: '',
    minArgs: 0,
    maxArgs: 0,
    summary: 'every node up or down with its latency, and the quorum',
    options: [],
    details: `Pings every node and reports it up (with its round trip) or down (with the
reason), whether a quorum is reachable, and the risks found in the nodes'
set-up (persistence, eviction, replicas, duplicates). Exit code 0 while a
quorum is reachable, 1 when it is not.`,
    examples: ['health', 'health --json'],
  },
};

const COMMAND_NAMES = Object.keys(COMMANDS) as CommandName[];

interface OptionSpec {
  readonly type: 'string' | 'boolean';
  readonly short?: string;
  readonly value?: string;
  readonly help: string;
}

const GLOBAL_OPTIONS: Readonly<Record<string, OptionSpec>> = {
  nodes: {
    type: 'string',
    value: '<urls>',
    help: 'the Redis nodes, comma-separated redis:// or rediss:// URLs (default: $REDIS_LOCK_NODES)',
  },
  prefix: {
    type: 'string',
    value: '<prefix>',
    help: `the app's keyPrefix (default '${LOCK_DEFAULTS.keyPrefix}')`,
  },
  'fence-counter-ttl': {
    type: 'string',
    value: '<ms>',
    help: `the app's fenceCounterTtl, 0 or at least 60000 (default ${LOCK_DEFAULTS.fenceCounterTtl})`,
  },
  json: { type: 'boolean', help: 'machine-readable output on stdout' },
  help: { type: 'boolean', short: 'h', help: 'show help (of a command, after its name)' },
  version: { type: 'boolean', help: 'show the version' },
};

const COMMAND_OPTIONS: Readonly<Record<string, OptionSpec>> = {
  limit: {
    type: 'string',
    value: '<n>',
    help: 'list at most n resources (default 1000)',
  },
  yes: { type: 'boolean', short: 'y', help: 'release without asking' },
};

const ALL_OPTIONS = { ...GLOBAL_OPTIONS, ...COMMAND_OPTIONS };
const DEFAULT_LIMIT = 1000;
const MAX_LIMIT = 100_000;
const NODES_EXAMPLE = 'redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379';

/** What the command line asks for. */
export type CliRequest =
  | { readonly kind: 'help'; readonly command: CommandName | undefined }
  | { readonly kind: 'version' }
  | ({ readonly kind: 'run' } & CommandRequest);

export interface CommandRequest {
  readonly command: CommandName;
  /** The resource (inspect, release) or the pattern (list, reseed). */
  readonly target: string | undefined;
  readonly nodes: readonly string[];
  readonly keyPrefix: string;
  readonly fenceCounterTtl: number;
  readonly json: boolean;
  readonly limit: number;
  readonly yes: boolean;
}

/**
 * Reads the arguments (after `node main.js`), falling back to
 * REDIS_LOCK_NODES for the nodes. Throws UsageError.
 */
export function parseCommandLine(argv: readonly string[], env: NodeJS.ProcessEnv): CliRequest {
  const { tokens } = parseArgs({
    args: [...argv],
    options: Object.fromEntries(
      Object.entries(ALL_OPTIONS).map(([name, spec]) => [
        name,
        { type: spec.type, multiple: true, ...(spec.short ? { short: spec.short } : {}) },
      ]),
    ),
    strict: false,
    allowPositionals: true,
    tokens: true,
  });
  const positionals: string[] = [];
  const values = new Map<string, string[]>();
  const flags = new Set<string>();
  const given: string[] = [];
  for (const token of tokens) {
    if (token.kind === 'positional') positionals.push(token.value);
    if (token.kind !== 'option') continue;
    const spec = ALL_OPTIONS[token.name];
    if (!spec) {
      throw new UsageError(
        `unknown option ${token.rawName}${suggest(token.name, Object.keys(ALL_OPTIONS), '--')}; ` +
          `run '${BIN} ${commandIn(positionals)}--help' for the options`,
      );
    }
    given.push(token.name);
    if (spec.type === 'boolean') {
      if (token.value !== undefined) {
        throw new UsageError(
          `${token.rawName} takes no value: write ${token.rawName} alone (got ${token.rawName}=${token.value})`,
        );
      }
      flags.add(token.name);
    } else {
      if (token.value === undefined || (!token.inlineValue && token.value.startsWith('-'))) {
        throw new UsageError(
          `${token.rawName} needs a value: write ${token.rawName} ${spec.value}` +
            (token.name === 'nodes' ? `, e.g. --nodes ${NODES_EXAMPLE}` : '') +
            ` (a value starting with '-' goes as ${token.rawName}=-...)`,
        );
      }
      values.set(token.name, [...(values.get(token.name) ?? []), token.value]);
    }
  }

  const [name, ...args] = positionals;
  if (name === 'help') {
    const topic = args[0];
    if (topic !== undefined && !isCommand(topic)) throw unknownCommand(topic);
    return { kind: 'help', command: topic as CommandName | undefined };
  }
  if (name !== undefined && !isCommand(name)) throw unknownCommand(name);
  const command = name as CommandName | undefined;
  if (flags.has('help')) return { kind: 'help', command };
  if (flags.has('version')) return { kind: 'version' };
  if (!command) {
    throw new UsageError(
      `name a command (${COMMAND_NAMES.join(', ')}), e.g. '${BIN} health --nodes redis://127.0.0.1:6379'; '${BIN} --help' lists them`,
    );
  }

  const spec = COMMANDS[command];
  for (const option of given) {
    if (!(option in GLOBAL_OPTIONS) && !spec.options.includes(option)) {
      const owner = COMMAND_NAMES.find((c) => COMMANDS[c].options.includes(option));
      throw new UsageError(
        `--${option} is an option of '${owner}', not of '${command}': leave it out (see '${BIN} ${command} --help')`,
      );
    }
  }
  const synopsis = `${BIN} ${command}${spec.args ? ` ${spec.args}` : ''}`;
  if (args.length < spec.minArgs) {
    throw new UsageError(
      `${command} needs a ${spec.args.slice(1, -1)}: write ${synopsis}, e.g. ${BIN} ${spec.examples[0]}`,
    );
  }
  if (args.length > spec.maxArgs) {
    const extra = args.slice(spec.maxArgs).join(' ');
    throw new UsageError(
      spec.maxArgs === 0
        ? `${command} takes no arguments (got '${extra}'): write ${synopsis}`
        : spec.minArgs === 0
          ? `${command} takes at most one pattern (got also '${extra}'): quote it so the shell does not expand it, e.g. ${BIN} ${spec.examples[0]}`
          : `${command} takes one ${spec.args.slice(1, -1)} (got also '${extra}'): write ${synopsis}, e.g. ${BIN} ${spec.examples[0]}`,
    );
  }

  const last = (option: string) => values.get(option)?.at(-1);
  return {
    kind: 'run',
    command,
    target: args[0],
    nodes: readNodes(values.get('nodes'), env),
    keyPrefix: readPrefix(last('prefix')),
    fenceCounterTtl: readFenceCounterTtl(last('fence-counter-ttl')),
    json: flags.has('json'),
    limit: readLimit(last('limit')),
    yes: flags.has('yes'),
  };
}

function isCommand(name: string): name is CommandName {
  return (COMMAND_NAMES as string[]).includes(name);
}

function commandIn(positionals: readonly string[]): string {
  const first = positionals[0];
  return first !== undefined && isCommand(first) ? `${first} ` : '';
}

function unknownCommand(name: string): UsageError {
  return new UsageError(
    `unknown command '${name}'${suggest(name, COMMAND_NAMES, '')}; the commands are ${COMMAND_NAMES.join(', ')} ('${BIN} --help' shows them)`,
  );
}

/** `(did you mean --limit?)` when a known name is one or two edits away. */
function suggest(name: string, known: readonly string[], dashes: string): string {
  const near = known
    .map((candidate) => ({ candidate, distance: editDistance(name, candidate) }))
    .filter((c) => c.distance <= 2)
    .sort((a, b) => a.distance - b.distance)[0];
  return near ? ` (did you mean ${dashes}${near.candidate}?)` : '';
}

function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      current[j] = Math.min(
        previous[j] + 1,
        current[j - 1] + 1,
        previous[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1),
      );
    }
    previous = current;
  }
  return previous[b.length];
}

/** Comma- or space-separated URLs from --nodes (repeatable), else REDIS_LOCK_NODES. */
function readNodes(option: readonly string[] | undefined, env: NodeJS.ProcessEnv): string[] {
  const source = option ? '--nodes' : 'REDIS_LOCK_NODES';
  const nodes = (option ?? [env.REDIS_LOCK_NODES ?? ''])
    .flatMap((value) => value.split(/[\s,]+/))
    .filter((url) => url !== '');
  if (nodes.length === 0) {
    throw new UsageError(
      `no Redis nodes given: add --nodes ${NODES_EXAMPLE} (the app's nodes, in any order), or set REDIS_LOCK_NODES to that list`,
    );
  }
  for (const node of nodes) {
    let protocol: string | undefined;
    try {
      protocol = new URL(node).protocol;
    } catch {
      protocol = undefined;
    }
    if (protocol !== 'redis:' && protocol !== 'rediss:') {
      throw new UsageError(
        `${source} takes redis:// (or rediss:// for TLS) URLs separated by commas, e.g. ${NODES_EXAMPLE} (got '${node}')`,
      );
    }
  }
  return nodes;
}

function readPrefix(value: string | undefined): string {
  if (value === undefined) return LOCK_DEFAULTS.keyPrefix;
  if (/[{}]/.test(value)) {
    throw new UsageError(
      `--prefix is the app's keyPrefix and has no '{' or '}' (got '${value}'): write e.g. --prefix 'lock:'`,
    );
  }
  return value;
}

function readFenceCounterTtl(value: string | undefined): number {
  if (value === undefined) return LOCK_DEFAULTS.fenceCounterTtl;
  const ms = /^\d+$/.test(value) ? Number(value) : NaN;
  if (!Number.isSafeInteger(ms) || (ms !== 0 && ms < 60_000)) {
    throw new UsageError(
      `--fence-counter-ttl is the app's fenceCounterTtl in ms, 0 or at least 60000 (got '${value}'): write e.g. --fence-counter-ttl 0 or --fence-counter-ttl ${LOCK_DEFAULTS.fenceCounterTtl}`,
    );
  }
  return ms;
}

function readLimit(value: string | undefined): number {
  if (value === undefined) return DEFAULT_LIMIT;
  const limit = /^\d+$/.test(value) ? Number(value) : NaN;
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > MAX_LIMIT) {
    throw new UsageError(
      `--limit takes a whole number from 1 to ${MAX_LIMIT} (got '${value}'): write e.g. --limit 100`,
    );
  }
  return limit;
}

// --- Help -----------------------------------------------------------------------

function optionLines(options: Readonly<Record<string, OptionSpec>>, names: readonly string[]) {
  const rows = names.map((name) => {
    const spec = options[name];
    const flag = `${spec.short ? `-${spec.short}, ` : '    '}--${name}${spec.value ? ` ${spec.value}` : ''}`;
    return [flag, spec.help] as const;
  });
  const width = Math.max(...rows.map(([flag]) => flag.length));
  return rows.map(([flag, help]) => `  ${flag.padEnd(width)}  ${help}`).join('\n');
}

/** The help of the tool, or of one command. */
export function helpText(command: CommandName | undefined): string {
  const globals = optionLines(GLOBAL_OPTIONS, Object.keys(GLOBAL_OPTIONS));
  if (!command) {
    const width = Math.max(...COMMAND_NAMES.map((c) => `${c} ${COMMANDS[c].args}`.length));
    return `Inspect and administer the locks of nestjs-redis-lock on their Redis nodes.

Usage: ${BIN} <command> [arguments] [options]

Commands:
${COMMAND_NAMES.map((c) => `  ${`${c} ${COMMANDS[c].args}`.padEnd(width)}  ${COMMANDS[c].summary}`).join('\n')}

Options:
${globals}

Exit codes: 0 done, 1 failed (nodes unreachable, no quorum, nothing to
release), 2 usage error. Passwords in node URLs are never printed.

Examples:
  ${BIN} inspect order:42 --nodes redis://127.0.0.1:6379
  REDIS_LOCK_NODES=${NODES_EXAMPLE} ${BIN} list 'order:*'

Run '${BIN} <command> --help' for a command's details.`;
  }
  const spec = COMMANDS[command];
  const own = spec.options.length
    ? `\n\nOptions of ${command}:\n${optionLines(COMMAND_OPTIONS, spec.options)}`
    : '';
  return `${BIN} ${command}: ${spec.summary}.

Usage: ${BIN} ${command}${spec.args ? ` ${spec.args}` : ''} [options]

${spec.details}${own}

Options:
${globals}

Examples:
${spec.examples.map((example) => `  ${BIN} ${example}`).join('\n')}`;
}
