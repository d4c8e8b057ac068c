/**
 * Child processes for the package tests: commands that run to the end (npm,
 * tsc, tar) and apps that keep running until stopped. Each runs in its own
 * process group, so a timeout (or afterAll) kills npm together with the
 * scripts and tools it started.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';

export interface RunResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

const running = new Set<ChildProcess>();
/** How long a server may take to exit on SIGTERM before it is killed. */
const STOP_TIMEOUT_MS = 10_000;

function killGroup(child: ChildProcess, signal: NodeJS.Signals = 'SIGKILL'): void {
  try {
    if (child.pid !== undefined) process.kill(-child.pid, signal);
  } catch {
    // already gone
  }
}

/** Kills every process group started here that is still running (for afterAll). */
export function killAll(): void {
  for (const child of running) killGroup(child);
}

/**
 * The environment without what the outer `npm test` set for this package, plus
 * `extra`.
 */
export function childEnv(extra: Readonly<Record<string, string>> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (/^(npm_package_|npm_lifecycle_|npm_command$|npm_config_local_prefix$|INIT_CWD$)/.test(name))
      continue;
    if (name === 'NODE_OPTIONS') continue; // --experimental-vm-modules is Jest's, not the app's
    env[name] = value;
  }
  return { ...env, ...extra };
}

function start(command: string, args: readonly string[], cwd: string, env: NodeJS.ProcessEnv) {
  const child = spawn(command, args, {
    cwd,
    env,
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  running.add(child);
  child.once('close', () => running.delete(child));
  return child;
}

export function run(
  command: string,
  args: readonly string[],
  cwd: string,
  timeoutMs: number,
): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = start(command, args, cwd, childEnv());
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const timer = setTimeout(() => {
      stderr += `\n[killed after ${timeoutMs} ms]`;
      killGroup(child);
    }, timeoutMs);
    child.once('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

export async function mustRun(
  what: string,
  command: string,
  args: readonly string[],
  cwd: string,
  timeoutMs: number,
): Promise<RunResult> {
  const result = await run(command, args, cwd, timeoutMs);
  if (result.code !== 0) {
    throw new Error(
      `${what} failed (${result.signal ?? `exit ${result.code}`}):\n${result.stdout}${result.stderr}`,
    );
  }
  return result;
}

/** A process that runs until stopped, read line by line. */
export interface Server {
  /** Every line printed on stdout so far. */
  readonly lines: readonly string[];
  /** What it printed on stderr so far. */
  readonly stderr: string;
  /**
   * The first line (printed already or still to come) that matches, or a
   * rejection if the process exits or `timeoutMs` passes first.
   */
  line(pattern: RegExp, timeoutMs: number): Promise<RegExpExecArray>;
  /** SIGTERM, then the exit. */
  stop(): Promise<void>;
}

export function startServer(
  command: string,
  args: readonly string[],
  cwd: string,
  env: Readonly<Record<string, string>>,
): Server {
  const child = start(command, args, cwd, childEnv(env));
  const lines: string[] = [];
  let stderr = '';
  let exited: string | undefined;
  const listeners = new Set<() => void>();
  const notify = (): void => listeners.forEach((listener) => listener());
  createInterface({ input: child.stdout! }).on('line', (line) => {
    lines.push(line);
    notify();
  });
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const closed = new Promise<void>((resolve) =>
    child.once('close', (code, signal) => {
      exited = signal ?? `exit ${code}`;
      notify();
      resolve();
    }),
  );
  child.once('error', (error) => {
    exited = error.message;
    notify();
  });

  return {
    lines,
    get stderr() {
      return stderr;
    },
    line(pattern, timeoutMs) {
      return new Promise((resolve, reject) => {
        const check = (): void => {
          for (const line of lines) {
            const match = pattern.exec(line);
            if (match) return finish(() => resolve(match));
          }
          if (exited !== undefined) {
            finish(() =>
              reject(new Error(`${command} ${args.join(' ')} ended (${exited}):\n${stderr}`)),
            );
          }
        };
        const timer = setTimeout(
          () =>
            finish(() =>
              reject(
                new Error(
                  `no line matching ${pattern} within ${timeoutMs} ms:\n${lines.join('\n')}\n${stderr}`,
                ),
              ),
            ),
          timeoutMs,
        );
        const finish = (settle: () => void): void => {
          clearTimeout(timer);
          listeners.delete(check);
          settle();
        };
        listeners.add(check);
        check();
      });
    },
    async stop() {
      if (exited !== undefined) return;
      killGroup(child, 'SIGTERM');
      const timer = setTimeout(() => killGroup(child), STOP_TIMEOUT_MS);
      await closed;
      clearTimeout(timer);
    },
  };
}

/** Runs at most `concurrency` of the functions given to it at once, in the order given. */
export function limiter(concurrency: number): <T>(task: () => Promise<T>) => Promise<T> {
  let active = 0;
  const queue: (() => void)[] = [];
  return async (task) => {
    if (active < concurrency) active += 1;
    else await new Promise<void>((resolve) => queue.push(resolve)); // a finished task hands over its slot
    try {
      return await task();
    } finally {
      const next = queue.shift();
      if (next) next();
      else active -= 1;
    }
  };
}
