/**
 * Reads the command line into a request, with node:util parseArgs in its
 * lenient mode so that every mistake gets a message of ours rather than
 * Node's: a UsageError that says what to write instead.
 */
import { parseArgs } from 'node:util';
import { LOCK_DEFAULTS, MAX_PERMITS } from '../engine/internal.js';
import {
  ALL_OPTIONS,
  BIN,
  COMMAND_NAMES,
  COMMANDS,
  DEFAULT_LIMIT,
  GLOBAL_OPTIONS,
  isCommand,
  MAX_LIMIT,
  NODES_EXAMPLE,
  RELEASE_KINDS,
  type CommandName,
  type ReleaseKind,
} from './command-line.js';
import { UsageError } from './exit-codes.js';
import { suggest } from './suggestions.js';

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
  /** The semaphore's N for inspect, when given. */
  readonly permits: number | undefined;
  /** What release releases, when given. */
  readonly releaseKind: ReleaseKind | undefined;
  /** The one holder release releases, when given. */
  readonly holder: string | undefined;
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
    permits: readPermits(last('permits')),
    ...readRelease(last('kind'), last('holder')),
  };
}

function readRelease(
  kind: string | undefined,
  holder: string | undefined,
): Pick<CommandRequest, 'releaseKind' | 'holder'> {
  if (kind !== undefined && !(RELEASE_KINDS as readonly string[]).includes(kind)) {
    throw new UsageError(
      `--kind is one of ${RELEASE_KINDS.join(', ')} (got '${kind}')${suggest(kind, RELEASE_KINDS, '--kind ')}`,
    );
  }
  if (holder !== undefined && kind === 'lock') {
    throw new UsageError(
      `--holder names one holder of a read-write lock or semaphore; a lock has one holder: leave --holder out, or write --kind read-write or --kind semaphore`,
    );
  }
  if (holder === '') {
    throw new UsageError(
      `--holder needs a holder's value as inspect shows it, e.g. --holder 3Jd9F0aQ`,
    );
  }
  return { releaseKind: kind as ReleaseKind | undefined, holder };
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

/** `value` as a whole number from 1 to `max`, or NaN. */
function count(value: string, max: number): number {
  const n = /^\d+$/.test(value) ? Number(value) : NaN;
  return Number.isSafeInteger(n) && n >= 1 && n <= max ? n : NaN;
}

function readLimit(value: string | undefined): number {
  if (value === undefined) return DEFAULT_LIMIT;
  const limit = count(value, MAX_LIMIT);
  if (Number.isNaN(limit)) {
    throw new UsageError(
      `--limit takes a whole number from 1 to ${MAX_LIMIT} (got '${value}'): write e.g. --limit 100`,
    );
  }
  return limit;
}

function readPermits(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const permits = count(value, MAX_PERMITS);
  if (Number.isNaN(permits)) {
    throw new UsageError(
      `--permits is the semaphore's N, a whole number from 1 to ${MAX_PERMITS} (got '${value}'): write e.g. --permits 4`,
    );
  }
  return permits;
}
