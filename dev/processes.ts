/**
 * Child processes for the tests, the demo and the redis-server harness: a
 * kill that reaches the child should its parent die, a wait for a SIGSTOP or
 * SIGCONT to take effect, and a registry of what to kill should this process
 * exit. TypeScript scripts run as children: scripts.ts.
 */
import { accessSync, constants as fsConstants, readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { runInThisContext } from 'node:vm';

export function isExecutable(path: string): boolean {
  try {
    accessSync(path, fsConstants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * The process itself. Under Jest a test file gets a copy of `process` whose
 * 'exit' never fires (and a fresh copy of every module); this is the real one.
 */
export const hostProcess: NodeJS.Process = (() => {
  try {
    return runInThisContext('process') as NodeJS.Process;
  } catch {
    return process;
  }
})();

/**
 * What must not outlive this process (servers it started, their data dirs):
 * a set kept on {@link hostProcess} under `name`, with one 'exit' hook that
 * runs `cleanUp` (synchronous: SIGKILL, rmSync) for every entry still in it.
 * Every test file run in a Jest worker shares the set and the hook.
 */
export function exitRegistry<T>(name: string, cleanUp: (entry: T) => void): Set<T> {
  const key = Symbol.for(name);
  const host = hostProcess as unknown as Record<symbol, Set<T> | undefined>;
  let registry = host[key];
  if (!registry) {
    const entries = new Set<T>();
    registry = host[key] = entries;
    hostProcess.on('exit', () => {
      for (const entry of entries) cleanUp(entry);
    });
  }
  return registry;
}

const SETPRIV = process.platform === 'linux' && isExecutable('/usr/bin/setpriv');

/**
 * `argv` run so that, on Linux, the kernel kills the child should its parent
 * die without running 'exit' handlers (SIGKILL, crash); unchanged elsewhere.
 */
export function withParentDeathSignal(argv: readonly string[]): string[] {
  return SETPRIV ? ['/usr/bin/setpriv', '--pdeathsig', 'KILL', ...argv] : [...argv];
}

/**
 * Waits until the kernel reports the process state (field 3 of /proc/PID/stat,
 * 'T' when stopped) that `accept` wants, so a SIGSTOP or SIGCONT has taken
 * effect when the caller goes on; a no-op off Linux.
 */
export async function waitForProcState(
  pid: number | undefined,
  accept: (state: string) => boolean,
  name: string,
): Promise<void> {
  if (process.platform !== 'linux' || pid === undefined) return;
  const deadline = performance.now() + 2_000;
  while (performance.now() < deadline) {
    let state: string;
    try {
      state = readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /s, '')[0] ?? '';
    } catch {
      return; // exited
    }
    if (accept(state)) return;
    await new Promise((resolve) => setImmediate(resolve));
  }
  throw new Error(`${name} (pid ${pid}) did not change state after a signal`);
}
