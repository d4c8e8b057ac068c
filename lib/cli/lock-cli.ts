/**
 * The command-line tool around the framework-free engine: parse, connect,
 * run one command, close, and say how it went in the exit code.
 */
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline/promises';
import { LockEngine, LockOptionsError, type LockLogger } from '../engine/internal.js';
import { SecretMask, Terminal, wantsColor } from './cli-output.js';
import { BIN } from './command-line.js';
import { COMMAND_RUNNERS } from './commands/index.js';
import { EXIT_FAILED, EXIT_OK, EXIT_USAGE, UsageError } from './exit-codes.js';
import { helpText } from './help-text.js';
import { parseCommandLine, type CliRequest } from './parse-arguments.js';

export interface CliIo {
  readonly stdout: { write(text: string): unknown; readonly isTTY?: boolean };
  readonly stderr: { write(text: string): unknown; readonly isTTY?: boolean };
  readonly stdin: NodeJS.ReadableStream & { readonly isTTY?: boolean };
  readonly env: NodeJS.ProcessEnv;
}

/** The engine's own notes (nodes unreachable at connect): the commands report every node themselves. */
const SILENT: LockLogger = { warn: () => undefined, error: () => undefined };

/** Runs the tool with `argv` (the arguments after the script) and resolves to its exit code. */
export async function runCli(argv: readonly string[], io: CliIo): Promise<number> {
  const secrets = new SecretMask();
  // Known before anything is printed, so no message can quote a password.
  for (const arg of [...argv, io.env.REDIS_LOCK_NODES ?? ''])
    for (const part of arg.replace(/^--?[\w-]+=/, '').split(/[\s,]+/)) secrets.addUrl(part);
  const term = new Terminal(
    io.stdout,
    io.stderr,
    secrets,
    wantsColor(io.stdout, io.env),
    wantsColor(io.stderr, io.env),
  );
  const usage = (error: UsageError | LockOptionsError) => {
    term.note(`${BIN}: ${error.message.replace(/\s*\n\s*/g, ' ')}`);
    return EXIT_USAGE;
  };

  let request: CliRequest;
  try {
    request = parseCommandLine(argv, io.env);
  } catch (error) {
    if (error instanceof UsageError) return usage(error);
    throw error;
  }
  if (request.kind === 'help') {
    term.print(helpText(request.command));
    return EXIT_OK;
  }
  if (request.kind === 'version') {
    term.print(version());
    return EXIT_OK;
  }
  if (request.command === 'release' && !request.yes && io.stdin.isTTY !== true) {
    return usage(
      new UsageError(
        `release asks for confirmation and stdin is not a terminal: add --yes to release without asking, e.g. '${BIN} release ${request.target} --yes'`,
      ),
    );
  }

  let engine: LockEngine;
  try {
    engine = new LockEngine({
      nodes: request.nodes,
      keyPrefix: request.keyPrefix,
      fenceCounterTtl: request.fenceCounterTtl,
      // The tool takes no locks: no subscriber connections, no start-up checks (health runs them).
      releaseNotifications: false,
      checkNodes: false,
      logger: SILENT,
    });
  } catch (error) {
    if (error instanceof LockOptionsError) return usage(error);
    throw error;
  }
  try {
    await engine.connect();
    return await COMMAND_RUNNERS[request.command]({
      engine,
      request,
      term,
      confirm: (question) => ask(question, io),
    });
  } catch (error) {
    if (error instanceof UsageError || error instanceof LockOptionsError) return usage(error);
    term.note(`${BIN}: ${error instanceof Error ? error.message : String(error)}`);
    return EXIT_FAILED;
  } finally {
    await engine.close();
  }
}

/** The package's version, from the package.json two levels up (lib/cli/ or dist/cli/). */
function version(): string {
  const manifest = readFileSync(new URL('../../package.json', import.meta.url), 'utf8');
  return (JSON.parse(manifest) as { version: string }).version;
}

/** A yes/no question on stderr, so stdout stays clean for --json; anything but y or yes is no. */
async function ask(question: string, io: CliIo): Promise<boolean> {
  const prompt = createInterface({
    input: io.stdin,
    output: io.stderr as NodeJS.WritableStream,
  });
  try {
    const answer = await new Promise<string>((resolve) => {
      // Ctrl-C or Ctrl-D: no.
      prompt.once('SIGINT', () => resolve(''));
      prompt.once('close', () => resolve(''));
      prompt.question(question).then(resolve, () => resolve(''));
    });
    return /^\s*y(es)?\s*$/i.test(answer);
  } finally {
    prompt.close();
  }
}
