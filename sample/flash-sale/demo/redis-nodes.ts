import { mkdir } from 'node:fs/promises';
import { createServer } from 'node:net';
import { readFileSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { isExecutable, type ManagedProcess, type ProcessRegistry } from './processes.js';

const HOST = '127.0.0.1';
const READY_LINE = /Ready to accept connections/;
const IN_USE = /Address already in use/;

export const REDIS_NOT_FOUND =
  "redis-server not found: install it with 'apt-get install -y redis-server' (Debian/Ubuntu) or 'brew install redis', or set REDIS_SERVER_BIN to its path";

/** REDIS_SERVER_BIN if set, else `redis-server` on the PATH; throws how to install it otherwise. */
export function findRedisServer(): string {
  const fromEnv = process.env.REDIS_SERVER_BIN;
  if (fromEnv) {
    if (!isExecutable(fromEnv)) throw new Error(REDIS_NOT_FOUND);
    return fromEnv;
  }
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    const candidate = join(dir || '.', 'redis-server');
    if (isExecutable(candidate)) return candidate;
  }
  throw new Error(REDIS_NOT_FOUND);
}

export interface RedisNode {
  readonly name: string;
  readonly url: string;
  readonly port: number;
  readonly process: ManagedProcess;
}

/**
 * Starts `count` independent redis-server nodes on free loopback ports, set
 * up the way fencing tokens need them: AOF with `appendfsync always`, no
 * eviction, no replicas.
 */
export async function startRedisNodes(
  count: number,
  dir: string,
  registry: ProcessRegistry,
): Promise<RedisNode[]> {
  const bin = findRedisServer();
  return Promise.all(
    Array.from({ length: count }, (_, i) => startNode(bin, `redis-${i + 1}`, dir, registry)),
  );
}

async function startNode(
  bin: string,
  name: string,
  parent: string,
  registry: ProcessRegistry,
): Promise<RedisNode> {
  const dir = join(parent, name);
  await mkdir(dir, { recursive: true });
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    // prettier-ignore
    const args = [
      '--port', String(port),
      '--bind', HOST,
      '--protected-mode', 'no',
      '--daemonize', 'no',
      '--dir', dir,
      '--logfile', '',
      '--save', '',
      '--appendonly', 'yes',
      '--appendfsync', 'always',
      '--maxmemory-policy', 'noeviction',
    ];
    const process = registry.spawn({
      name,
      command: bin,
      args,
      logFile: join(dir, 'redis.log'),
    });
    try {
      await process.waitForLine(READY_LINE, 15_000);
      return { name, url: `redis://${HOST}:${port}`, port, process };
    } catch (error) {
      await process.stop();
      // Another program took the port between the probe and the bind: try another one.
      if (attempt < 5 && IN_USE.test(process.tail())) continue;
      throw error;
    }
  }
}

/**
 * A free port below the kernel's ephemeral range, so that no outgoing
 * connection of the apps can take it as its source port meanwhile.
 */
async function freePort(): Promise<number> {
  const low = ephemeralLow();
  for (let attempt = 0; attempt < 50; attempt++) {
    const candidate = low > 21_000 ? 20_000 + Math.floor(Math.random() * (low - 20_000)) : 0;
    const port = await probe(candidate);
    if (port !== undefined) return port;
  }
  throw new Error('no free loopback port found for redis-server');
}

function ephemeralLow(): number {
  try {
    return Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').split(/\s+/)[0]);
  } catch {
    return 0;
  }
}

function probe(port: number): Promise<number | undefined> {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once('error', () => resolve(undefined));
    server.listen({ port, host: HOST, exclusive: true }, () => {
      const address = server.address();
      server.close(() =>
        resolve(typeof address === 'object' && address ? address.port : undefined),
      );
    });
  });
}
