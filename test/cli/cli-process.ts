/**
 * The command-line tool run as a user runs it: a separate `node` process
 * (through tsx, so no build is needed and nothing races on dist/), and what
 * the specs read from its output.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const MAIN = 'lib/cli/main.ts';

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
  /** When the process exited (performance.now()). */
  exitedAt: number;
}

/** `node --import tsx lib/cli/main.ts ...args`, with stdin closed (not a terminal). */
export function cli(args: readonly string[], env: NodeJS.ProcessEnv = {}): Promise<CliResult> {
  const base = { ...process.env };
  // Jest's NODE_OPTIONS are not the tool's; a user's REDIS_LOCK_NODES must not leak into a test.
  delete base.NODE_OPTIONS;
  delete base.REDIS_LOCK_NODES;
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', MAIN, ...args], {
      cwd: ROOT,
      env: { ...base, ...env },
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
