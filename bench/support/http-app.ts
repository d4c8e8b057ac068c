/**
 * The bench's Nest app (bench/http/) as a separate Node.js process, so that
 * it has a core of its own and its CPU can be read apart from the load
 * generator's.
 *
 * Nest needs the decorator metadata (`design:paramtypes`) that tsx/esbuild do
 * not emit, so the app and lib/ are compiled with tsc (bench/http/tsconfig.json,
 * without type checking) into the git-ignored bench/results/tmp/http/, once
 * per run, the way a user's app is built.
 */
import { fork, spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const ROOT = join(here, '..', '..');
const TSCONFIG = join(ROOT, 'bench', 'http', 'tsconfig.json');
const OUT = join(ROOT, 'bench', 'results', 'tmp', 'http');
const MAIN = join(OUT, 'bench', 'http', 'main.js');
/**
 * ESLint does not read .gitignore, and tsc's decorator helpers (`__decorate`)
 * break its rules; the files that carry them get this banner.
 */
const BANNER = '/* eslint-disable */\n';
const HELPERS = /^var __(decorate|metadata|param) =/m;
const START_TIMEOUT_MS = 30_000;

export type HttpPlatform = 'express' | 'fastify';

let compiled: Promise<void> | undefined;

/** Runs tsc on bench/http/tsconfig.json once per run. */
export function compileHttpApp(): Promise<void> {
  compiled ??= (async () => {
    const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
    await rm(OUT, { recursive: true, force: true });
    const child = spawn(process.execPath, [tsc, '-p', TSCONFIG, '--noCheck'], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const [code] = (await once(child, 'exit')) as [number | null];
    if (code !== 0) throw new Error(`tsc -p bench/http/tsconfig.json failed (${code}):\n${output}`);
    for (const file of await readdir(OUT, { recursive: true })) {
      if (!file.endsWith('.js')) continue;
      const text = await readFile(join(OUT, file), 'utf8');
      if (HELPERS.test(text) && !text.startsWith(BANNER)) {
        await writeFile(join(OUT, file), BANNER + text);
      }
    }
  })();
  return compiled;
}

/** A running app process. */
export interface HttpApp {
  readonly url: string;
  readonly pid: number;
  readonly platform: HttpPlatform;
  stop(): Promise<void>;
}

/** How the app's RedisLockModule differs from its defaults. */
export interface HttpAppOptions {
  /** The engine is given auto-pipelining clients. */
  readonly autoPipeliningClients?: boolean;
  /** `contextInterceptor: false`, with the interceptor on the locked handler only. */
  readonly noContextInterceptor?: boolean;
}

/**
 * Starts the app on `platform`, with RedisLockModule on `nodes` (its
 * defaults, but for `options`), or without the lock module when `nodes` is
 * undefined.
 */
export async function startHttpApp(
  platform: HttpPlatform,
  nodes: readonly string[] | undefined,
  options: HttpAppOptions = {},
): Promise<HttpApp> {
  await compileHttpApp();
  const child: ChildProcess = fork(MAIN, [], {
    cwd: ROOT,
    // A plain Node.js process: not the bench's --import tsx / --expose-gc.
    execArgv: [],
    env: {
      ...process.env,
      BENCH_HTTP_PLATFORM: platform,
      BENCH_HTTP_NODES: nodes ? nodes.join(',') : '',
      BENCH_HTTP_AP_CLIENTS: options.autoPipeliningClients ? '1' : '0',
      BENCH_HTTP_CONTEXT_INTERCEPTOR: options.noContextInterceptor ? '0' : '1',
      NODE_ENV: 'production',
    },
    stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
  });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
    if (stderr.length > 20_000) stderr = stderr.slice(-10_000);
  });
  const exited = once(child, 'exit') as Promise<[number | null, NodeJS.Signals | null]>;
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(timer);
  };
  try {
    const port = await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`the app did not start within ${START_TIMEOUT_MS / 1000} s`)),
        START_TIMEOUT_MS,
      );
      child.once('message', (message: { ready?: boolean; port?: number }) => {
        clearTimeout(timer);
        if (message.ready && message.port) resolve(message.port);
        else reject(new Error(`unexpected message from the app: ${JSON.stringify(message)}`));
      });
      exited.then(([code, signal]) => {
        clearTimeout(timer);
        reject(new Error(`the app exited (${signal ?? code}) before listening:\n${stderr.trim()}`));
      });
    });
    return { url: `http://127.0.0.1:${port}`, pid: child.pid as number, platform, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}
