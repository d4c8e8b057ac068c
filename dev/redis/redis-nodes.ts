/**
 * Real redis-server processes, one independent server per node on its own
 * loopback port with its own data dir, so callers can kill, pause and restart
 * nodes the way production loses them.
 *
 * Framework-free on purpose: the Jest suites use it through
 * `useRedisNodes()` (test/support/use-redis-nodes.ts), the benchmark
 * (bench/run.ts) and the flash-sale demo (sample/flash-sale/demo/demo.ts,
 * compiled into sample/dist by sample/tsconfig.json) import it directly, and
 * plain `node` loads it.
 *
 * ```ts
 * const nodes = await startRedisNodes(3);
 * try {
 *   const client = new Redis(nodes[0].url);
 * } finally {
 *   await stopRedisNodes(nodes);
 * }
 * ```
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createWriteStream, existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { createServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { Redis } from 'ioredis';
import {
  exitRegistry,
  hostProcess,
  isExecutable,
  waitForProcState,
  withParentDeathSignal,
} from '../processes.js';

export interface RedisNodeOptions {
  /** AOF persistence. Default: true. */
  appendonly?: boolean;
  /** Default: 'always', so a killed node loses nothing it acknowledged. */
  appendfsync?: 'always' | 'everysec' | 'no';
  /** More `--name value` arguments for redis-server. */
  extraArgs?: string[];
  requirepass?: string;
  /**
   * Serve TLS only: the node's port becomes its `--tls-port`, the plain port
   * is closed (`--port 0`) and `url` is `rediss://`. Default: plain TCP.
   */
  tls?: RedisNodeTls;
  /**
   * Runs a Sentinel (`redis-server <conf> --sentinel`) instead of a data node.
   * These lines (e.g. `sentinel monitor mymaster 127.0.0.1 6379 1`) start the
   * sentinel.conf in its dir, which Sentinel rewrites with what it learns
   * (so a restart keeps it). Used by redis-topologies.ts.
   */
  sentinel?: readonly string[];
  /**
   * Runs the server in its own process group, so a Ctrl-C in the terminal
   * reaches only the caller, which then stops the node itself. Default: false
   * (the node gets the Ctrl-C with the test run).
   */
  detached?: boolean;
  /**
   * More environment variables for the server process, on top of this
   * process's (e.g. an LD_PRELOAD that shifts its clock: test/chaos).
   */
  env?: Readonly<Record<string, string>>;
}

/** PEM files of a TLS node (`--tls-cert-file`, `--tls-key-file`, `--tls-ca-cert-file`). */
export interface RedisNodeTls {
  readonly certFile: string;
  readonly keyFile: string;
  /** The CA that signed `certFile`; also what client certificates must chain to. */
  readonly caFile: string;
  /** Require client certificates (`--tls-auth-clients yes`). Default: false. */
  readonly authClients?: boolean;
}

const HOST = '127.0.0.1';
const READY_LINE = 'Ready to accept connections';
/** A Sentinel logs no READY_LINE; it logs its id once it listens. */
const SENTINEL_READY_LINE = 'Sentinel ID is';
/** How long a node may take to accept connections. */
export const REDIS_START_TIMEOUT_MS = 15_000;
const STOP_TIMEOUT_MS = 5_000;
const BIND_ATTEMPTS = 5;

const NOT_FOUND_MESSAGE =
  "redis-server not found: install it with 'apt-get install -y redis-server' (Debian/Ubuntu) or 'brew install redis', or set REDIS_SERVER_BIN to its path";

/** REDIS_SERVER_BIN if set, else `redis-server` on PATH. */
export function findRedisServer(): string {
  const fromEnv = process.env.REDIS_SERVER_BIN;
  if (fromEnv) {
    if (!isExecutable(fromEnv)) throw new Error(NOT_FOUND_MESSAGE);
    return fromEnv;
  }
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    const candidate = join(dir || '.', 'redis-server');
    if (isExecutable(candidate)) return candidate;
  }
  throw new Error(NOT_FOUND_MESSAGE);
}

// --- Safety net -------------------------------------------------------------
// Nodes still running when the process exits are killed and their dirs removed
// (exitRegistry: under Jest, on the worker's real process).

interface LiveNode {
  readonly pid: number | undefined;
  readonly dir: string;
}

const liveNodes = () =>
  exitRegistry<LiveNode>('nestjs-redis-lock.test.redis-nodes', (node) => {
    try {
      if (node.pid !== undefined) hostProcess.kill(node.pid, 'SIGKILL');
    } catch {
      // already gone
    }
    rmSync(node.dir, { recursive: true, force: true });
  });

// --- Ports ------------------------------------------------------------------
// Ports come from below the kernel's ephemeral range: a port handed out by
// listen(0) can be taken as the source port of some outgoing connection while
// its node is down, and then restart() could not bind it again.

const reservedPorts = new Set<number>();

function ephemeralLow(): number {
  try {
    const low = Number(
      readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').split(/\s+/)[0],
    );
    return Number.isInteger(low) && low > 21_000 ? low : 0;
  } catch {
    return 0;
  }
}

function listenOnce(port: number): Promise<number | undefined> {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once('error', () => resolve(undefined));
    server.listen({ port, host: HOST, exclusive: true }, () => {
      const address = server.address();
      const bound = typeof address === 'object' && address ? address.port : undefined;
      server.close(() => resolve(bound));
    });
  });
}

async function freePort(): Promise<number> {
  const low = ephemeralLow();
  for (let attempt = 0; attempt < 50; attempt++) {
    const candidate = low ? 20_000 + Math.floor(Math.random() * (low - 20_000)) : 0;
    if (reservedPorts.has(candidate)) continue;
    const port = await listenOnce(candidate);
    if (port !== undefined && !reservedPorts.has(port)) {
      reservedPorts.add(port);
      return port;
    }
  }
  throw new Error('no free loopback port found for redis-server');
}

// --- Nodes ------------------------------------------------------------------

export class RedisNodeProcess implements LiveNode {
  readonly host = HOST;
  private child: ChildProcess | undefined;
  private exited: Promise<void> = Promise.resolve();
  private paused = false;
  private stopped = false;

  private constructor(
    private currentPort: number,
    readonly dir: string,
    private readonly bin: string,
    private readonly options: RedisNodeOptions,
  ) {}

  /** Starts one node on a free port, trying other ports if the bind fails. */
  static async start(options: RedisNodeOptions = {}): Promise<RedisNodeProcess> {
    const bin = findRedisServer();
    const dir = await mkdtemp(join(tmpdir(), 'redis-lock-node-'));
    const node = new RedisNodeProcess(await freePort(), dir, bin, options);
    liveNodes().add(node);
    for (let attempt = 1; ; attempt++) {
      try {
        await node.spawnServer();
        return node;
      } catch (error) {
        const busy = error instanceof PortInUseError;
        if (!busy || attempt >= BIND_ATTEMPTS) {
          await node.stop();
          throw error;
        }
        reservedPorts.delete(node.currentPort);
        node.currentPort = await freePort();
      }
    }
  }

  get port(): number {
    return this.currentPort;
  }

  /** `redis://127.0.0.1:PORT` (`rediss://` with `tls`), with the password when `requirepass` is set. */
  get url(): string {
    const auth = this.options.requirepass
      ? `:${encodeURIComponent(this.options.requirepass)}@`
      : '';
    return `${this.options.tls ? 'rediss' : 'redis'}://${auth}${HOST}:${this.currentPort}`;
  }

  get password(): string | undefined {
    return this.options.requirepass;
  }

  /** The running server's pid; undefined while it is down. */
  get pid(): number | undefined {
    return this.isRunning ? this.child?.pid : undefined;
  }

  get isRunning(): boolean {
    return (
      this.child !== undefined && this.child.exitCode === null && this.child.signalCode === null
    );
  }

  get logFile(): string {
    return join(this.dir, 'redis.log');
  }

  /** Sends `signal` and resolves once the server has exited. Default: SIGKILL (a crash). */
  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    const child = this.child;
    if (!this.isRunning || !child) return;
    child.kill(signal);
    // A stopped process only acts on SIGKILL; let it see any other signal.
    if (this.paused && signal !== 'SIGKILL') child.kill('SIGCONT');
    this.paused = false;
    await this.exited;
  }

  /** SIGSTOP: the server keeps its sockets but answers nothing until resume(). */
  async pause(): Promise<void> {
    if (!this.isRunning || this.paused) return;
    this.child?.kill('SIGSTOP');
    this.paused = true;
    await waitForProcState(this.child?.pid, (state) => state === 'T', 'redis-server');
  }

  /** SIGCONT after pause(). */
  async resume(): Promise<void> {
    if (!this.isRunning || !this.paused) return;
    this.child?.kill('SIGCONT');
    this.paused = false;
    await waitForProcState(this.child?.pid, (state) => state !== 'T', 'redis-server');
  }

  /**
   * Starts the server again on the same port and dir (so the AOF is replayed),
   * resolving once it accepts connections. A running server is first shut down
   * with SIGTERM.
   */
  async restart(): Promise<void> {
    if (this.stopped) throw new Error(`redis node on port ${this.currentPort} was stopped`);
    await this.kill('SIGTERM');
    await this.spawnServer();
  }

  /** Back to a serving state after any fault: resume() if paused, restart() if down. */
  async ensureRunning(): Promise<void> {
    if (this.isRunning) await this.resume();
    else await this.restart();
  }

  /** Shuts the server down (SIGTERM, then SIGKILL) and removes its dir. Idempotent. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    if (this.isRunning) {
      const child = this.child;
      child?.kill('SIGTERM');
      if (this.paused) child?.kill('SIGCONT');
      this.paused = false;
      const timer = setTimeout(() => child?.kill('SIGKILL'), STOP_TIMEOUT_MS);
      await this.exited;
      clearTimeout(timer);
    }
    rmSync(this.dir, { recursive: true, force: true });
    reservedPorts.delete(this.currentPort);
    liveNodes().delete(this);
  }

  /** Runs one command on a short-lived connection; replies are rendered like `redis-cli --raw`. */
  async cli(command: string, ...args: (string | number)[]): Promise<string> {
    const client = new Redis({
      host: HOST,
      port: this.currentPort,
      password: this.options.requirepass,
      ...(this.options.tls ? { tls: tlsClientOptions(this.options.tls) } : {}),
      lazyConnect: true,
      connectTimeout: 5_000,
      commandTimeout: 5_000,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
      // Its default (2 s) keeps a timer alive when the server is already gone.
      disconnectTimeout: 100,
    });
    try {
      await client.connect();
      return renderReply(await client.call(command, ...args));
    } finally {
      client.disconnect();
    }
  }

  async flushAll(): Promise<void> {
    await this.cli('FLUSHALL');
  }

  private serverArgs(): string[] {
    const {
      appendonly = true,
      appendfsync = 'always',
      extraArgs = [],
      requirepass,
      tls,
    } = this.options;
    // prettier-ignore
    const tlsArgs = tls
      ? [
          '--tls-port', String(this.currentPort),
          '--tls-cert-file', tls.certFile,
          '--tls-key-file', tls.keyFile,
          '--tls-ca-cert-file', tls.caFile,
          '--tls-auth-clients', tls.authClients ? 'yes' : 'no',
        ]
      : [];
    // prettier-ignore
    return [
      '--port', tls ? '0' : String(this.currentPort),
      ...tlsArgs,
      '--bind', HOST,
      '--protected-mode', 'no',
      '--daemonize', 'no',
      '--dir', this.dir,
      // Logged to stdout, which we copy to redis.log and watch for the ready line.
      '--logfile', '',
      '--save', '',
      '--appendonly', appendonly ? 'yes' : 'no',
      '--appendfsync', appendfsync,
      '--maxmemory-policy', 'noeviction',
      ...(requirepass ? ['--requirepass', requirepass] : []),
      ...extraArgs,
    ];
  }

  /** A Sentinel's config file and mode flag, which must come before the other arguments. */
  private sentinelArgs(): string[] {
    const { sentinel } = this.options;
    if (!sentinel) return [];
    const file = join(this.dir, 'sentinel.conf');
    if (!existsSync(file)) writeFileSync(file, `${sentinel.join('\n')}\n`);
    return [file, '--sentinel'];
  }

  /** Spawns redis-server and resolves when it logs that it accepts connections. */
  private spawnServer(): Promise<void> {
    const [command, ...args] = withParentDeathSignal([
      this.bin,
      ...this.sentinelArgs(),
      ...this.serverArgs(),
    ]);
    const child = spawn(command, args, {
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: this.options.detached ?? false,
      ...(this.options.env ? { env: { ...process.env, ...this.options.env } } : {}),
    });
    this.child = child;
    this.paused = false;
    this.exited = once(child, 'exit').then(() => undefined);
    // A leaked server must not keep Jest (or any caller) alive; the 'exit' hook kills it.
    child.unref();
    (child.stdout as Socket | null)?.unref();
    (child.stderr as Socket | null)?.unref();

    const log = createWriteStream(this.logFile, { flags: 'a' });
    child.stdout?.pipe(log);
    child.stderr?.pipe(log);

    return new Promise<void>((resolve, reject) => {
      let output = '';
      const onData = (chunk: Buffer): void => {
        output += chunk.toString();
        if (output.includes(this.options.sentinel ? SENTINEL_READY_LINE : READY_LINE)) settle();
      };
      const onExit = (code: number | null, signal: NodeJS.Signals | null): void => {
        const tail = output.trim().split('\n').slice(-5).join('\n');
        settle(
          /Address already in use/.test(output)
            ? new PortInUseError(this.currentPort)
            : new Error(
                `redis-server on port ${this.currentPort} exited (${signal ?? code}) before it was ready:\n${tail}`,
              ),
        );
      };
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        settle(
          new Error(
            `redis-server on port ${this.currentPort} not ready after ${REDIS_START_TIMEOUT_MS} ms`,
          ),
        );
      }, REDIS_START_TIMEOUT_MS);
      const settle = (error?: Error): void => {
        clearTimeout(timer);
        child.stdout?.off('data', onData);
        child.stderr?.off('data', onData);
        child.off('exit', onExit);
        if (error) reject(error);
        else resolve();
      };
      child.stdout?.on('data', onData);
      child.stderr?.on('data', onData);
      child.once('exit', onExit);
      child.once('error', (error) => settle(error));
    });
  }
}

class PortInUseError extends Error {
  constructor(port: number) {
    super(`port ${port} is already in use`);
    this.name = 'PortInUseError';
  }
}

/**
 * What a client of a TLS node needs: its CA, and with `authClients` a
 * certificate of its own (the server's, which that CA signed, does).
 */
function tlsClientOptions(tls: RedisNodeTls): { ca: Buffer; cert?: Buffer; key?: Buffer } {
  const ca = readFileSync(tls.caFile);
  return tls.authClients
    ? { ca, cert: readFileSync(tls.certFile), key: readFileSync(tls.keyFile) }
    : { ca };
}

function renderReply(reply: unknown): string {
  if (reply === null || reply === undefined) return '';
  if (Array.isArray(reply)) return reply.map(renderReply).join('\n');
  if (Buffer.isBuffer(reply)) return reply.toString();
  return String(reply);
}

/** Starts `count` independent servers in parallel; resolves when all accept connections. */
export async function startRedisNodes(
  count: number,
  options: RedisNodeOptions = {},
): Promise<RedisNodeProcess[]> {
  const results = await Promise.allSettled(
    Array.from({ length: count }, () => RedisNodeProcess.start(options)),
  );
  const nodes = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
  const failure = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failure) {
    await stopRedisNodes(nodes);
    throw failure.reason;
  }
  return nodes;
}

export async function stopRedisNodes(nodes: readonly RedisNodeProcess[]): Promise<void> {
  await Promise.all(nodes.map((node) => node.stop()));
}
