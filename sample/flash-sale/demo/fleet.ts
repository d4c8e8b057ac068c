import { join } from 'node:path';
import type { ManagedProcess, ProcessRegistry } from './processes.js';

/** One running instance of the sample app. */
export interface AppInstance {
  readonly name: string;
  readonly url: string;
  readonly process: ManagedProcess;
}

export interface FleetOptions {
  readonly count: number;
  /** The compiled app (`sample/dist/sample/flash-sale/main.js`). */
  readonly entry: string;
  /** The app's configuration (LOCK_NODES, LOCKS, DB_FILE, ...); PORT and INSTANCE are set per instance. */
  readonly env: Record<string, string>;
  readonly logDir: string;
  /** Prefix of the instances' log files, e.g. `locked`. */
  readonly label: string;
}

const LISTENING = /listening on (http:\/\/\S+)/;

/**
 * Starts `count` instances of the app as separate Node processes on free
 * ports (each binds port 0 and logs the port it got); resolves once every
 * one of them accepts requests.
 */
export async function startFleet(
  options: FleetOptions,
  registry: ProcessRegistry,
): Promise<AppInstance[]> {
  const started = Array.from({ length: options.count }, (_, i) => {
    const name = `app-${i + 1}`;
    const process = registry.spawn({
      name,
      command: globalThis.process.execPath,
      args: [options.entry],
      env: {
        ...globalThis.process.env,
        ...options.env,
        INSTANCE: name,
        PORT: '0',
        HOST: '127.0.0.1',
        NO_COLOR: '1',
      },
      logFile: join(options.logDir, `${options.label}-${name}.log`),
    });
    return process
      .waitForLine(LISTENING, 30_000)
      .then((match): AppInstance => ({ name, url: match[1], process }));
  });
  const results = await Promise.allSettled(started);
  const failure = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failure) throw failure.reason;
  return results.map((r) => (r as PromiseFulfilledResult<AppInstance>).value);
}

export async function stopFleet(fleet: readonly AppInstance[]): Promise<void> {
  await Promise.all(fleet.map((app) => app.process.stop()));
}
