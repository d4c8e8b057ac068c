/**
 * The command line without a process: what a line of arguments asks for, the
 * help written from the command table, and the "did you mean" suggestions.
 * (cli.spec.ts runs the tool itself, usage errors included.)
 */
import { describe, expect, it } from '@jest/globals';
import { LOCK_DEFAULTS } from '../../lib/engine/index.js';
import { COMMAND_NAMES, COMMANDS } from '../../lib/cli/command-line.js';
import { UsageError } from '../../lib/cli/exit-codes.js';
import { helpText } from '../../lib/cli/help-text.js';
import { parseCommandLine } from '../../lib/cli/parse-arguments.js';
import { editDistance, suggest } from '../../lib/cli/suggestions.js';

const NODE = 'redis://127.0.0.1:6379';

describe('parsing the command line', () => {
  it("fills in the app's defaults for what is not given", () => {
    expect(parseCommandLine(['inspect', 'order:42', '--nodes', NODE], {})).toEqual({
      kind: 'run',
      command: 'inspect',
      target: 'order:42',
      nodes: [NODE],
      keyPrefix: LOCK_DEFAULTS.keyPrefix,
      fenceCounterTtl: LOCK_DEFAULTS.fenceCounterTtl,
      json: false,
      limit: 1000,
      yes: false,
    });
  });

  it('takes the nodes from REDIS_LOCK_NODES, separated by commas or spaces, unless --nodes is given', () => {
    const env = { REDIS_LOCK_NODES: 'redis://a:1, redis://b:2 redis://c:3' };
    expect(parseCommandLine(['health'], env)).toMatchObject({
      nodes: ['redis://a:1', 'redis://b:2', 'redis://c:3'],
    });
    expect(
      parseCommandLine(['health', '--nodes', 'redis://x:1', '--nodes=redis://y:2'], env),
    ).toMatchObject({ nodes: ['redis://x:1', 'redis://y:2'] });
  });

  it('reads options before or after the arguments, inline or not; the last value wins', () => {
    expect(
      parseCommandLine(
        ['--limit=5', 'list', 'order:*', '--json', '--limit', '7', '--prefix', 'app:'],
        { REDIS_LOCK_NODES: NODE },
      ),
    ).toMatchObject({
      command: 'list',
      target: 'order:*',
      limit: 7,
      json: true,
      keyPrefix: 'app:',
    });
    expect(
      parseCommandLine(['release', 'order:42', '-y', '--fence-counter-ttl', '0'], {
        REDIS_LOCK_NODES: NODE,
      }),
    ).toMatchObject({ yes: true, fenceCounterTtl: 0 });
    expect(
      parseCommandLine(['inspect', 'payments', '--permits', '4'], { REDIS_LOCK_NODES: NODE }),
    ).toMatchObject({ command: 'inspect', target: 'payments', permits: 4 });
    expect(
      parseCommandLine(['release', 'catalogue', '--kind', 'read-write', '--holder', 'v1'], {
        REDIS_LOCK_NODES: NODE,
      }),
    ).toMatchObject({ command: 'release', releaseKind: 'read-write', holder: 'v1' });
  });

  it('asks for help or the version without needing nodes', () => {
    expect(parseCommandLine(['--help'], {})).toEqual({ kind: 'help', command: undefined });
    expect(parseCommandLine(['-h'], {})).toEqual({ kind: 'help', command: undefined });
    expect(parseCommandLine(['help', 'list'], {})).toEqual({ kind: 'help', command: 'list' });
    expect(parseCommandLine(['reseed', '--help'], {})).toEqual({ kind: 'help', command: 'reseed' });
    expect(parseCommandLine(['--version'], {})).toEqual({ kind: 'version' });
  });

  it('throws a UsageError for a mistake, naming the fix', () => {
    const mistake = (argv: string[]) => {
      try {
        parseCommandLine(argv, { REDIS_LOCK_NODES: NODE });
      } catch (error) {
        return error;
      }
      return undefined;
    };
    for (const argv of [[], ['inpsect'], ['list', '--json=yes'], ['health', 'extra']]) {
      expect(mistake(argv)).toBeInstanceOf(UsageError);
    }
    expect((mistake(['help', 'lst']) as Error).message).toContain(
      "unknown command 'lst' (did you mean list?)",
    );
    expect((mistake(['list', '--json=yes']) as Error).message).toBe(
      '--json takes no value: write --json alone (got --json=yes)',
    );
    expect((mistake(['release', 'x', '--kind', 'semaphor']) as Error).message).toBe(
      "--kind is one of lock, read-write, semaphore (got 'semaphor') (did you mean --kind semaphore?)",
    );
    expect(
      (mistake(['release', 'x', '--kind', 'lock', '--holder', 'v1']) as Error).message,
    ).toMatch(
      /^--holder names one holder of a read-write lock or semaphore; a lock has one holder/,
    );
    expect((mistake(['inspect', 'x', '--holder', 'v1']) as Error).message).toBe(
      "--holder is an option of 'release', not of 'inspect': leave it out (see 'nestjs-redis-lock inspect --help')",
    );
  });
});

describe('help', () => {
  it('lists every command of the table with its arguments and summary', () => {
    const overview = helpText(undefined);
    for (const name of COMMAND_NAMES) {
      expect(overview).toMatch(
        new RegExp(
          `^  ${name} ${COMMANDS[name].args.replace(/[[\]]/g, '\\$&')} *  ${COMMANDS[name].summary}$`,
          'm',
        ),
      );
    }
  });

  it("shows a command's own options, not another command's", () => {
    const list = helpText('list');
    expect(list).toContain('Options of list:\n      --limit <n>');
    expect(list).not.toContain('--yes');
    expect(helpText('health')).not.toContain('Options of health');
    for (const name of COMMAND_NAMES) {
      for (const example of COMMANDS[name].examples) {
        expect(helpText(name)).toContain(`  nestjs-redis-lock ${example}`);
      }
    }
  });
});

describe('did you mean', () => {
  it('counts insertions, deletions and substitutions', () => {
    expect(editDistance('limit', 'limit')).toBe(0);
    expect(editDistance('lmit', 'limit')).toBe(1);
    expect(editDistance('inpsect', 'inspect')).toBe(2);
    expect(editDistance('', 'yes')).toBe(3);
  });

  it('suggests the nearest known name within two edits, and nothing further away', () => {
    expect(suggest('lmit', ['limit', 'json'], '--')).toBe(' (did you mean --limit?)');
    expect(suggest('lis', ['inspect', 'list'], '')).toBe(' (did you mean list?)');
    expect(suggest('helth', ['hello', 'health'], '')).toBe(' (did you mean health?)');
    expect(suggest('prefixes', ['prefix'], '--')).toBe(' (did you mean --prefix?)');
    expect(suggest('colour', ['json', 'limit', 'yes'], '--')).toBe('');
  });
});
