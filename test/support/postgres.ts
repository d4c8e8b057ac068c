/**
 * A real PostgreSQL server for a test file: Debian's `postgresql` package,
 * `initdb` into a temporary directory, a free loopback port, the socket in
 * that directory, trust authentication for the `postgres` role. No Docker.
 *
 * PostgreSQL refuses to run as root, and CI runs the tests as root: then
 * every PostgreSQL program runs through `runuser -u postgres`, and the
 * directory is handed to that user first.
 *
 * Framework-free like the redis-server harness (dev/redis/redis-nodes.ts):
 *
 * ```ts
 * const server = await startPostgres();
 * try {
 *   const pool = new pg.Pool(server.connection);
 * } finally {
 *   await server.stop();
 * }
 * ```
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { readdirSync, readFileSync, rmSync } from 'node:fs';
import { chmod, mkdtemp } from 'node:fs/promises';
import { createServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { exitRegistry, hostProcess, isExecutable } from '../../dev/processes.js';

const HOST = '127.0.0.1';
const READY_LINE = 'database system is ready to accept connections';
export const POSTGRES_START_TIMEOUT_MS = 30_000;
const STOP_TIMEOUT_MS = 10_000;
const run = promisify(execFile);

const NOT_FOUND_MESSAGE =
  "PostgreSQL's server programs were not found: install them with 'apt-get install -y postgresql' " +
  '(Debian/Ubuntu; they land in /usr/lib/postgresql/<version>/bin), or set POSTGRES_BIN_DIR to the directory holding initdb and postgres';

/** POSTGRES_BIN_DIR if set, else the newest /usr/lib/postgresql/<version>/bin. */
export function findPostgresBin(): string {
  const fromEnv = process.env.POSTGRES_BIN_DIR;
  const candidates = fromEnv
    ? [fromEnv]
    : (() => {
        try {
          return readdirSync('/usr/lib/postgresql')
            .filter((version) => /^\d+$/.test(version))
            .sort((a, b) => Number(b) - Number(a))
            .map((version) => join('/usr/lib/postgresql', version, 'bin'));
        } catch {
          return [];
        }
      })();
  const found = candidates.find(
    (dir) => isExecutable(join(dir, 'initdb')) && isExecutable(join(dir, 'postgres')),
  );
  if (found) return found;
  throw new Error(NOT_FOUND_MESSAGE);
}

export interface PostgresConnection {
  readonly host: string;
  readonly port: number;
  readonly user: string;
  readonly database: string;
}

// --- Safety net ---------------------------------------------------------------
// Servers still running when the process exits are killed and their dirs removed
// (exitRegistry, as for the redis-server harness).

const liveServers = () =>
  exitRegistry<PostgresServer>('nestjs-redis-lock.test.postgres', (server) => server.killNow());

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once('error', reject);
    server.listen({ port: 0, host: HOST, exclusive: true }, () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

export class PostgresServer {
  readonly host = HOST;
  readonly user = 'postgres';
  readonly database = 'postgres';
  private stopped = false;

  private constructor(
    readonly dir: string,
    readonly port: number,
    private readonly child: ChildProcess,
    private readonly exited: Promise<void>,
  ) {}

  /** What `new pg.Pool()` / `new pg.Client()` / TypeORM's `postgres` options take. */
  get connection(): PostgresConnection {
    return { host: HOST, port: this.port, user: this.user, database: this.database };
  }

  get dataDir(): string {
    return join(this.dir, 'data');
  }

  static async start(): Promise<PostgresServer> {
    const bin = findPostgresBin();
    // As root, the postgres user runs every program; otherwise the current user does.
    const asRoot = process.getuid?.() === 0;
    const wrap = (argv: string[]) => (asRoot ? ['runuser', '-u', 'postgres', '--', ...argv] : argv);
    const dir = await mkdtemp(join(tmpdir(), 'redis-lock-pg-'));
    try {
      await chmod(dir, 0o700);
      // The programs run in this directory (cwd below): the postgres user must own it.
      if (asRoot) await run('chown', ['postgres:postgres', dir]);
      const [initdb, ...initArgs] = wrap([
        join(bin, 'initdb'),
        '-D',
        join(dir, 'data'),
        '-U',
        'postgres',
        '--auth=trust',
        '--encoding=UTF8',
        '--locale=C',
        // A test database: no fsync of the new cluster, which costs seconds on a busy disk.
        '--no-sync',
      ]);
      await run(initdb!, initArgs, { cwd: dir });
    } catch (error) {
      rmSync(dir, { recursive: true, force: true });
      const { stderr } = error as { stderr?: string };
      throw new Error(`initdb failed in ${dir}: ${stderr || (error as Error).message}`);
    }

    for (let attempt = 1; ; attempt++) {
      const port = await freePort();
      // prettier-ignore
      const [command, ...args] = wrap([
        join(bin, 'postgres'),
        '-D', join(dir, 'data'),
        '-p', String(port),
        '-k', dir,
        '-c', `listen_addresses=${HOST}`,
        // Durability is not what these tests check; speed on 2 cores is welcome.
        '-c', 'fsync=off',
        '-c', 'synchronous_commit=off',
        '-c', 'full_page_writes=off',
        '-c', 'max_connections=100',
      ]);
      const child = spawn(command!, args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
      const exited = once(child, 'exit').then(() => undefined);
      // A leaked server must not keep Jest alive; the 'exit' hook kills it.
      child.unref();
      (child.stdout as Socket | null)?.unref();
      (child.stderr as Socket | null)?.unref();
      const server = new PostgresServer(dir, port, child, exited);
      liveServers().add(server);
      try {
        await server.ready();
        return server;
      } catch (error) {
        await server.kill();
        liveServers().delete(server);
        const busy = /could not bind|Address already in use/.test(String(error));
        if (!busy || attempt >= 5) {
          rmSync(dir, { recursive: true, force: true });
          throw error;
        }
      }
    }
  }

  /** Fast shutdown (SIGINT: clients are disconnected), then the directory is removed. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    await this.kill();
    rmSync(this.dir, { recursive: true, force: true });
    liveServers().delete(this);
  }

  /** SIGKILL to the server and the directory removed at once: for the process 'exit' hook. */
  killNow(): void {
    for (const pid of [this.postmasterPid(), this.child.pid]) {
      try {
        if (pid !== undefined) hostProcess.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    rmSync(this.dir, { recursive: true, force: true });
  }

  private async kill(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    // The postmaster itself, not runuser in front of it: runuser would pass on a SIGTERM, which
    // is PostgreSQL's "smart" shutdown that waits for every client to leave.
    const pid = this.postmasterPid() ?? this.child.pid;
    const signal = (name: NodeJS.Signals) => {
      try {
        if (pid !== undefined) process.kill(pid, name);
      } catch {
        // already gone
      }
    };
    signal('SIGINT');
    const timer = setTimeout(() => signal('SIGKILL'), STOP_TIMEOUT_MS);
    await this.exited;
    clearTimeout(timer);
  }

  private postmasterPid(): number | undefined {
    try {
      const pid = Number(readFileSync(join(this.dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
      return Number.isInteger(pid) && pid > 0 ? pid : undefined;
    } catch {
      return undefined;
    }
  }

  private ready(): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      let output = '';
      const onData = (chunk: Buffer) => {
        output += chunk.toString();
        if (output.includes(READY_LINE)) settle();
      };
      const onExit = (code: number | null, signal: NodeJS.Signals | null) =>
        settle(
          new Error(
            `postgres on port ${this.port} exited (${signal ?? code}) before it was ready:\n${output.trim().split('\n').slice(-8).join('\n')}`,
          ),
        );
      const timer = setTimeout(
        () =>
          settle(
            new Error(
              `postgres on port ${this.port} not ready after ${POSTGRES_START_TIMEOUT_MS} ms:\n${output}`,
            ),
          ),
        POSTGRES_START_TIMEOUT_MS,
      );
      const settle = (error?: Error) => {
        clearTimeout(timer);
        this.child.stdout?.off('data', onData);
        this.child.stderr?.off('data', onData);
        this.child.off('exit', onExit);
        // Keep draining its output, or a full pipe would stall the server's logging.
        this.child.stdout?.resume();
        this.child.stderr?.resume();
        if (error) reject(error);
        else resolve();
      };
      this.child.stdout?.on('data', onData);
      this.child.stderr?.on('data', onData);
      this.child.once('exit', onExit);
      this.child.once('error', (error) => settle(error));
    });
  }
}

export function startPostgres(): Promise<PostgresServer> {
  return PostgresServer.start();
}

/**
 * An idle pooled connection that the server's shutdown closes makes its pool
 * (pg.Pool) emit 'error' (57P01), which without a listener ends the process,
 * also when the pool was already asked to end. Any other error still throws.
 */
export function ignoreShutdownErrors<
  P extends { on(event: 'error', listener: (error: Error & { code?: string }) => void): unknown },
>(pool: P): P {
  pool.on('error', (error) => {
    if (error.code !== '57P01') throw error;
  });
  return pool;
}
