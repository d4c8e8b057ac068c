/**
 * The command-line tool as the specs run it: in this process through
 * `runCli()` (what `main.ts` calls, with the same arguments, environment and
 * a stdin that is not a terminal), or as a user runs it, a separate `node`
 * process (through tsx, so no build is needed and nothing races on dist/);
 * and what the specs read from its output. Most specs run it in this
 * process: a process costs a second or more of start-up on a loaded 2-core
 * machine, forty times over. The specs of `main.ts` itself (exit codes, a
 * process that ends on its own) start one.
 */
import { spawn } from 'node:child_process';
import { PassThrough } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { runCli } from '../../lib/cli/lock-cli.js';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const MAIN = 'lib/cli/main.ts';

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
  /** When the process exited (performance.now()). */
  exitedAt: number;
}

/** The environment the tool sees: this one's, with `env` over it. */
function toolEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const base = { ...process.env };
  // Jest's NODE_OPTIONS are not the tool's; a user's REDIS_LOCK_NODES must not leak into a test.
  delete base.NODE_OPTIONS;
  delete base.REDIS_LOCK_NODES;
  return { ...base, ...env };
}

/** `runCli(args)` in this process, its output collected, stdin empty and not a terminal. */
export async function cli(
  args: readonly string[],
  env: NodeJS.ProcessEnv = {},
): Promise<CliResult> {
  let stdout = '';
  let stderr = '';
  const stdin = new PassThrough();
  stdin.end();
  const code = await runCli(args, {
    stdin,
    stdout: { write: (text: string) => (stdout += text) },
    stderr: { write: (text: string) => (stderr += text) },
    env: toolEnv(env),
  });
  return { code, stdout, stderr, exitedAt: performance.now() };
}

/** `node --import tsx lib/cli/main.ts ...args`, with stdin closed (not a terminal). */
export function cliProcess(
  args: readonly string[],
  env: NodeJS.ProcessEnv = {},
): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', MAIN, ...args], {
      cwd: ROOT,
      env: toolEnv(env),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    // A hung tool fails its test instead of hanging the suite.
    const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
    child.once('error', reject);
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr, exitedAt: performance.now() });
    });
  });
}

export function json<T = Record<string, unknown>>(result: CliResult): T {
  return JSON.parse(result.stdout) as T;
}

/** `text` as a regular expression that matches it literally. */
export const literal = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** The column at which `text` starts in every line that has it. */
export function columnsOf(output: string, text: string): number[] {
  return output
    .split('\n')
    .filter((line) => line.includes(text))
    .map((line) => line.indexOf(text));
}
