/**
 * What the command line is made of: the commands with their arguments and
 * help, and the options. The parser (parse-arguments.ts) and the help
 * (help-text.ts) both read these tables.
 */
import { LOCK_DEFAULTS } from '../engine/internal.js';

export const BIN = 'nestjs-redis-lock';

/** Three nodes as --nodes takes them, for examples in help and errors. */
export const NODES_EXAMPLE = 'redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379';

export const DEFAULT_LIMIT = 1000;
export const MAX_LIMIT = 100_000;

export type CommandName = 'inspect' | 'list' | 'release' | 'reseed' | 'health';

export interface CommandSpec {
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

/** What `release --kind` names. */
export const RELEASE_KINDS = ['lock', 'read-write', 'semaphore'] as const;
export type ReleaseKind = (typeof RELEASE_KINDS)[number];

export const COMMANDS: Readonly<Record<CommandName, CommandSpec>> = {
  inspect: {
    args: '<resource>',
    minArgs: 1,
    maxArgs: 1,
    summary:
      'holder, lease and fence counter of one lock on every node, and its read-write lock and semaphore',
    options: ['permits'],
    details: `Shows what each node holds for the resource (the lock's value, its remaining
lease and the fence counter, i.e. the last token the node issued: for this
resource, or for any resource where the node has one counter for all, the
default fenceCounter 'node') and the verdict: held (a quorum of nodes holds
the same value), free, or unknown (too few nodes answered to tell). When the
name also has a read-write lock or a semaphore, each gets a section of its
own: every node's holders (mode or slot, lease, token), the waiters in line,
and the verdict (held for reading by 3, 2 of 4 permits held, free, unknown);
the lock's section is left out when it has no key and another one is shown.
Exit code 0 when held or free, 1 when a section is unknown.`,
    examples: ['inspect order:42', 'inspect order:42 --json', 'inspect payments-api --permits 4'],
  },
  list: {
    args: '[pattern]',
    minArgs: 0,
    maxArgs: 1,
    summary: 'the locks, read-write locks and semaphores whose name matches a pattern',
    options: ['limit'],
    details: `Lists the resources with a lock key on any node whose name matches the
pattern (a Redis glob: * ? [abc]; default *), each with its verdict, holder,
lease and fence counter, and the read-write locks and semaphores held there
(a KIND column tells them apart). Exit code 1 when fewer than a quorum of
nodes answered (the list could miss locks).`,
    examples: ["list 'order:*'", "list 'order:*' --limit 20 --json"],
  },
  release: {
    args: '<resource>',
    minArgs: 1,
    maxArgs: 1,
    summary: 'force-release a stuck lock, read-write lock or semaphore, whoever holds it',
    options: ['yes', 'kind', 'holder'],
    details: `Deletes the lock key of the resource on every node and wakes its waiters;
for a read-write lock or a semaphore of that name, every holder's entry (or
only the one --holder names: a value that inspect shows), waking their
waiters as a release does. When the name has more than one of them, say
which with --kind. The holders are not told and may go on writing: their
fencing tokens keep their late writes out. Shows what it will release and
asks for confirmation first, unless --yes; without a terminal to ask on,
--yes is required. Exit code 1 when no node held it (nothing released),
when it was declined, or when fewer than a quorum of nodes answered.`,
    examples: [
      'release order:42',
      'release order:42 --yes',
      'release catalogue --kind read-write --holder 3Jd9F0aQ',
      'release payments-api --kind semaphore',
    ],
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

export const COMMAND_NAMES = Object.keys(COMMANDS) as CommandName[];

export function isCommand(name: string): name is CommandName {
  return (COMMAND_NAMES as string[]).includes(name);
}

export interface OptionSpec {
  readonly type: 'string' | 'boolean';
  readonly short?: string;
  readonly value?: string;
  readonly help: string;
}

export const GLOBAL_OPTIONS: Readonly<Record<string, OptionSpec>> = {
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

export const COMMAND_OPTIONS: Readonly<Record<string, OptionSpec>> = {
  limit: {
    type: 'string',
    value: '<n>',
    help: `list at most n resources (default ${DEFAULT_LIMIT})`,
  },
  yes: { type: 'boolean', short: 'y', help: 'release without asking' },
  permits: {
    type: 'string',
    value: '<n>',
    help: "the semaphore's N, to show the permits in use out of it (the nodes do not keep it)",
  },
  kind: {
    type: 'string',
    value: '<kind>',
    help: `what to release when the name has several: ${RELEASE_KINDS.join(', ')}`,
  },
  holder: {
    type: 'string',
    value: '<value>',
    help: 'release only this holder of a read-write lock or semaphore (its value, as inspect shows it)',
  },
};

export const ALL_OPTIONS: Readonly<Record<string, OptionSpec>> = {
  ...GLOBAL_OPTIONS,
  ...COMMAND_OPTIONS,
};
