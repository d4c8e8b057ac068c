/**
 * One worker process of the lost-update test (lost-updates.spec.ts): a
 * read-modify-write counter, incremented under a lock of the engine, in every
 * store at once: through each helper of nestjs-redis-lock/fenced, and with the
 * write-only statement (`WHERE last_token < :token`) as the control.
 *
 * ```sh
 * node --import tsx test/fenced/counter-worker.ts '<json settings>'
 * ```
 *
 * Protocol, one JSON object per line on stdout: `{"ev":"ready"}`; per
 * operation `{"ev":"read","token":T}` once every store was read, then a wait
 * for a `go` line on stdin (the test stops the holders it pauses before it
 * sends it, so they stop right there, whatever the machine's load), then
 * `{"ev":"wrote","token":T,...}`; on `stop` (stdin),
 * `{"ev":"done","accepted":{...},"refused":{...}}` and exit.
 */
import Database from 'better-sqlite3';
import { Redis } from 'ioredis';
import { Kysely, SqliteDialect } from 'kysely';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { DataSource } from 'typeorm';
import { LockEngine, LockError } from '../../lib/engine/index.js';
import {
  FencedWriteRejectedError,
  kyselyFence,
  pgFence,
  redisFence,
  sqliteFence,
  typeormFence,
} from '../../lib/fenced/index.js';
import {
  COUNTER_TABLES,
  STORES,
  type StoreName,
  type WorkerMessage,
  type WorkerSettings,
} from './counter-stores.js';

interface Counter {
  /** Reads the counter (claiming it, for the helpers); undefined when a newer token had claimed it. */
  read(token: number): Promise<number | undefined>;
  /** Writes read + 1; false when refused. */
  write(token: number, value: number): Promise<boolean>;
}

function send(message: WorkerMessage): void {
  // A pipe on Linux is written synchronously: the line is out before the work that follows.
  process.stdout.write(`${JSON.stringify(message)}\n`);
}

/** A helper's refusal means false; anything else is a failure of the run. */
async function fenced<T>(work: () => Promise<T>): Promise<T | undefined> {
  try {
    return await work();
  } catch (error) {
    if (error instanceof FencedWriteRejectedError) return undefined;
    throw error;
  }
}

async function main(settings: WorkerSettings): Promise<void> {
  const pool = new pg.Pool({ ...settings.postgres, max: 2 });
  const typeorm = new DataSource({
    type: 'postgres',
    ...settings.postgres,
    username: settings.postgres.user,
    extra: { max: 1 },
  });
  await typeorm.initialize();
  const sqlite = new Database(settings.sqliteFile, { timeout: 10_000 });
  const kysely = new Kysely<Record<string, Record<string, unknown>>>({
    dialect: new SqliteDialect({
      database: new Database(settings.sqliteFile, { timeout: 10_000 }),
    }),
  });
  const redis = new Redis(settings.storeRedis);
  const id = { id: 1 };

  const pgTable = pgFence<{ n: number }>(pool, { table: COUNTER_TABLES.pg });
  const typeormTable = typeormFence<{ n: number }>(typeorm, {
    table: COUNTER_TABLES['typeorm-pg'],
  });
  const sqliteTable = sqliteFence<{ n: number }>(sqlite, {
    table: COUNTER_TABLES['better-sqlite3'],
  });
  const kyselyTable = kyselyFence<{ n: number }>(kysely, {
    table: COUNTER_TABLES['kysely-sqlite'],
    dialect: 'sqlite',
  });
  const hash = redisFence(redis);
  const sqliteWriteOnly = sqlite.prepare(
    `UPDATE ${COUNTER_TABLES['write-only-sqlite']} SET n = ?, last_token = ? WHERE id = 1 AND last_token < ?`,
  );

  const counters: Record<StoreName, Counter> = {
    pg: {
      read: async (token) => (await fenced(() => pgTable.claim(id, token)))?.n,
      write: async (token, n) =>
        (await fenced(() => pgTable.write(id, token, { n }))) !== undefined,
    },
    'typeorm-pg': {
      read: async (token) => (await fenced(() => typeormTable.claim(id, token)))?.n,
      write: async (token, n) =>
        (await fenced(() => typeormTable.write(id, token, { n }))) !== undefined,
    },
    'better-sqlite3': {
      read: async (token) => (await fenced(async () => sqliteTable.claim(id, token)))?.n,
      write: async (token, n) =>
        (await fenced(async () => sqliteTable.write(id, token, { n }))) !== undefined,
    },
    'kysely-sqlite': {
      read: async (token) => (await fenced(() => kyselyTable.claim(id, token)))?.n,
      write: async (token, n) =>
        (await fenced(() => kyselyTable.write(id, token, { n }))) !== undefined,
    },
    redis: {
      read: async (token) => {
        const fields = await fenced(() => hash.claim(COUNTER_TABLES.redis, token));
        return fields && Number(fields.n ?? 0);
      },
      write: async (token, n) =>
        (await fenced(() => hash.write(COUNTER_TABLES.redis, token, { n }))) !== undefined,
    },
    // The statement the README used to teach: fenced at the write only.
    'write-only-pg': {
      read: async () =>
        Number(
          (await pool.query(`SELECT n FROM ${COUNTER_TABLES['write-only-pg']} WHERE id = 1`))
            .rows[0].n,
        ),
      write: async (token, n) =>
        ((
          await pool.query(
            `UPDATE ${COUNTER_TABLES['write-only-pg']} SET n = $1, last_token = $2 WHERE id = 1 AND last_token < $2`,
            [n, token],
          )
        ).rowCount ?? 0) === 1,
    },
    'write-only-sqlite': {
      read: async () =>
        (
          sqlite
            .prepare(`SELECT n FROM ${COUNTER_TABLES['write-only-sqlite']} WHERE id = 1`)
            .get() as { n: number }
        ).n,
      write: async (token, n) => sqliteWriteOnly.run(n, token, token).changes === 1,
    },
  };

  const engine = new LockEngine({
    nodes: [...settings.lockNodes],
    ttl: settings.ttl,
    nodeTimeout: 100,
    waitTimeout: 10_000,
    logger: { warn: () => undefined, error: (m) => process.stderr.write(`error: ${m}\n`) },
  });
  await engine.connect();

  const accepted = Object.fromEntries(STORES.map((s) => [s, 0])) as Record<StoreName, number>;
  const refused = Object.fromEntries(STORES.map((s) => [s, 0])) as Record<StoreName, number>;
  let ops = 0;
  let stopping = false;
  /** Resolved by the test's `go` line: a holder that has read waits for it before its work. */
  let go: (() => void) | undefined;
  const input = createInterface({ input: process.stdin });
  input.on('line', (line) => {
    if (line.trim() === 'stop') stopping = true;
    if (line.trim() === 'go') go?.();
  });
  send({ ev: 'ready' });

  while (!stopping) {
    let lock;
    try {
      lock = await engine.acquire(settings.resource);
    } catch (error) {
      // A lock node down or the lock held too long by a paused holder: ask again.
      if (error instanceof LockError) continue;
      throw error;
    }
    const token = lock.token!;
    const reads = {} as Record<StoreName, number | undefined>;
    for (const store of STORES) reads[store] = await counters[store].read(token);
    // The test may stop this process now, right after its read, before it lets it go on.
    const released = new Promise<void>((resolve) => (go = resolve));
    send({ ev: 'read', token });
    await released;
    await sleep(settings.workMs);
    const wrote: StoreName[] = [];
    const lost: StoreName[] = [];
    for (const store of STORES) {
      const value = reads[store];
      if (value !== undefined && (await counters[store].write(token, value + 1))) {
        accepted[store]++;
        wrote.push(store);
      } else {
        refused[store]++;
        lost.push(store);
      }
    }
    ops++;
    send({ ev: 'wrote', token, accepted: wrote, refused: lost });
    await lock.release().catch(() => undefined);
  }

  send({ ev: 'done', accepted, refused, ops });
  input.close();
  await Promise.allSettled([engine.close(), pool.end(), typeorm.destroy(), kysely.destroy()]);
  sqlite.close();
  redis.disconnect();
}

main(JSON.parse(process.argv[2] ?? '{}') as WorkerSettings).catch((error: unknown) => {
  send({
    ev: 'error',
    message: error instanceof Error ? (error.stack ?? error.message) : String(error),
  });
  process.exit(1);
});
