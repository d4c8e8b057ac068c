/**
 * 0 lost updates through every helper of nestjs-redis-lock/fenced, measured:
 * worker processes (counter-worker.ts) increment one counter in every store
 * under a lock of the engine on three real redis-server nodes, while this
 * test pauses lock holders past their lease (SIGSTOP after their read,
 * SIGCONT once the next holder has read) and kills lock nodes. The
 * write-only statement (`WHERE last_token < :token`), run beside the helpers,
 * is the negative control: in the same run it must lose updates.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import Database from 'better-sqlite3';
import type { ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import pg from 'pg';
import { ignoreShutdownErrors, startPostgres, type PostgresServer } from '../support/postgres.js';
import { waitForProcState } from '../../dev/processes.js';
import { spawnScript } from '../../dev/scripts.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';
import {
  COUNTER_TABLES,
  STORES,
  type StoreName,
  type WorkerMessage,
  type WorkerSettings,
} from './counter-stores.js';

const WORKERS = 4;
/** Holders paused past their lease, one after the other. */
const ZOMBIE_ROUNDS = 10;
/** A lock node is killed every this many rounds, and restarted from its AOF a round later. */
const KILL_EVERY = 3;
const LEASE_MS = 250;
const WORK_MS = 40;
/** Operations left to run undisturbed between two paused holders. */
const OPS_BETWEEN = 8;

const script = fileURLToPath(new URL('./counter-worker.ts', import.meta.url));

// Three lock nodes, and a fourth that holds the fenced Redis hash and is never faulted.
const redis = useRedisNodes(4);

type Listener = (message: WorkerMessage) => boolean;

/** One worker process and the lines it wrote. */
class Worker {
  readonly exited: Promise<unknown>;
  private readonly listeners = new Set<Listener>();
  /** What the worker wrote to stderr (why it failed, when it did). */
  stderr = '';
  last: WorkerMessage | undefined;

  constructor(
    readonly name: string,
    readonly child: ChildProcess,
    onMessage: (worker: Worker, message: WorkerMessage) => void,
  ) {
    createInterface({ input: child.stdout! }).on('line', (line) => {
      const message = JSON.parse(line) as WorkerMessage;
      this.last = message;
      onMessage(this, message);
      for (const listener of [...this.listeners])
        if (listener(message)) this.listeners.delete(listener);
    });
    child.stderr!.on('data', (chunk: Buffer) => (this.stderr += chunk.toString()));
    this.exited = once(child, 'close');
  }

  /** Resolves with the first message from now on that `match` accepts. */
  next<T extends WorkerMessage>(
    match: (message: WorkerMessage) => message is T,
    what: string,
  ): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const listener: Listener = (message) => {
        if (message.ev === 'error') reject(new Error(`${this.name}: ${message.message}`));
        else if (match(message)) resolve(message);
        else return false;
        return true;
      };
      this.listeners.add(listener);
      void this.exited.then(() =>
        reject(new Error(`${this.name} exited before ${what}:\n${this.stderr}`)),
      );
    });
  }

  /** Lets the worker go on after its read (it waits for this line). */
  go(): void {
    this.child.stdin!.write('go\n');
  }

  async signal(name: 'SIGSTOP' | 'SIGCONT'): Promise<void> {
    this.child.kill(name);
    await waitForProcState(
      this.child.pid,
      (s) => (name === 'SIGSTOP' ? s === 'T' : s !== 'T'),
      this.name,
    );
  }
}

describe('a read-modify-write counter under paused holders and killed lock nodes', () => {
  let postgres: PostgresServer;
  let pool: pg.Pool;
  let dir: string;
  let sqliteFile: string;
  const workers: Worker[] = [];

  beforeAll(async () => {
    [postgres, dir] = await Promise.all([
      startPostgres(),
      mkdtemp(join(tmpdir(), 'lost-updates-')),
    ]);
    pool = ignoreShutdownErrors(new pg.Pool({ ...postgres.connection, max: 2 }));
    for (const table of ['counter_pg', 'counter_typeorm', 'counter_write_only']) {
      await pool.query(
        `CREATE TABLE ${table} (id integer PRIMARY KEY, n integer NOT NULL, last_token bigint NOT NULL DEFAULT 0)`,
      );
      await pool.query(`INSERT INTO ${table} (id, n) VALUES (1, 0)`);
    }
    sqliteFile = join(dir, 'counter.sqlite');
    const sqlite = new Database(sqliteFile);
    sqlite.pragma('journal_mode = WAL');
    for (const table of ['counter_sqlite', 'counter_kysely', 'counter_write_only']) {
      sqlite.exec(
        `CREATE TABLE ${table} (id INTEGER PRIMARY KEY, n INTEGER NOT NULL, last_token INTEGER NOT NULL DEFAULT 0);
         INSERT INTO ${table} (id, n) VALUES (1, 0);`,
      );
    }
    sqlite.close();
  }, 60_000);

  afterAll(async () => {
    for (const worker of workers) {
      worker.child.kill('SIGCONT');
      worker.child.kill('SIGKILL');
    }
    await Promise.all(workers.map((w) => w.exited));
    await pool?.end();
    await postgres?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('loses no update through any helper, while the write-only statement loses some', async () => {
    const started = performance.now();
    const lockNodes = redis.nodes.slice(0, 3);
    const settings: WorkerSettings = {
      lockNodes: lockNodes.map((n) => n.url),
      storeRedis: redis.nodes[3]!.url,
      postgres: postgres.connection,
      sqliteFile,
      resource: 'counter',
      ttl: LEASE_MS,
      workMs: WORK_MS,
    };
    // Every read line, in the order this process saw them.
    const reads: { worker: Worker; token: number }[] = [];
    const readWaiters = new Set<(read: { worker: Worker; token: number }) => boolean>();
    let writes = 0;
    const writeWaiters = new Set<() => boolean>();
    const onMessage = (worker: Worker, message: WorkerMessage) => {
      if (message.ev === 'wrote') {
        writes++;
        for (const waiter of [...writeWaiters]) if (waiter()) writeWaiters.delete(waiter);
      }
      if (message.ev !== 'read') return;
      const read = { worker, token: message.token };
      reads.push(read);
      // A read a round waits for is let go by that round, once it has stopped the worker.
      for (const waiter of [...readWaiters]) {
        if (waiter(read)) {
          readWaiters.delete(waiter);
          return;
        }
      }
      worker.go();
    };
    const nextRead = (accept: (read: { worker: Worker; token: number }) => boolean) =>
      new Promise<{ worker: Worker; token: number }>((resolve) => {
        readWaiters.add((read) => {
          if (!accept(read)) return false;
          resolve(read);
          return true;
        });
      });

    for (let i = 0; i < WORKERS; i++) {
      const child = spawnScript(script, { args: [JSON.stringify(settings)] });
      const worker = new Worker(`worker-${i + 1}`, child, onMessage);
      workers.push(worker);
    }
    await Promise.all(
      workers.map((w) => w.next((m): m is WorkerMessage => m.ev === 'ready', 'it was ready')),
    );
    // A worker that dies before it is told to stop fails the test at once, with its stderr,
    // instead of leaving the rounds waiting for reads and writes that cannot come.
    let stopping = false;
    const died = new Promise<never>((_, reject) => {
      for (const w of workers) {
        void w.exited.then(() => {
          if (!stopping) reject(new Error(`${w.name} exited during the run:\n${w.stderr}`));
        });
      }
    });
    died.catch(() => undefined);
    const unlessDied = <T>(waiting: Promise<T>): Promise<T> => Promise.race([waiting, died]);

    const writesReach = (count: number) =>
      new Promise<void>((resolve) => {
        const check = () => (writes >= count ? (resolve(), true) : false);
        if (!check()) writeWaiters.add(check);
      });

    let paused = 0;
    let nodesKilled = 0;
    let down: (typeof lockNodes)[number] | undefined;
    for (let round = 1; round <= ZOMBIE_ROUNDS; round++) {
      if (round % KILL_EVERY === 1 && round > 1) {
        down = lockNodes[round % lockNodes.length]!;
        await down.kill('SIGKILL');
        nodesKilled++;
      }
      // The holder that has just read is paused: its lease runs out while it is stopped.
      const zombie = await unlessDied(nextRead(() => true));
      await zombie.worker.signal('SIGSTOP');
      zombie.worker.go();
      // The next holder reads with a newer token; it is held right there, after its read.
      const next = await unlessDied(
        nextRead((r) => r.worker !== zombie.worker && r.token > zombie.token),
      );
      await next.worker.signal('SIGSTOP');
      next.worker.go();
      // The zombie writes from its old read: between the next holder's read and its write.
      const zombieWrote = zombie.worker.next(
        (m): m is Extract<WorkerMessage, { ev: 'wrote' }> =>
          m.ev === 'wrote' && m.token === zombie.token,
        `its write with token ${zombie.token}`,
      );
      await zombie.worker.signal('SIGCONT');
      await zombieWrote;
      await next.worker.signal('SIGCONT');
      paused++;
      await unlessDied(writesReach(writes + OPS_BETWEEN));
      if (down && round % KILL_EVERY === 2) {
        await down.restart();
        down = undefined;
      }
    }
    if (down) await down.restart();

    stopping = true;
    for (const worker of workers) worker.child.stdin!.write('stop\n');
    const done = await Promise.all(
      workers.map((w) =>
        w.last?.ev === 'done'
          ? (w.last as Extract<WorkerMessage, { ev: 'done' }>)
          : w.next(
              (m): m is Extract<WorkerMessage, { ev: 'done' }> => m.ev === 'done',
              'its totals',
            ),
      ),
    );
    await Promise.all(workers.map((w) => w.exited));

    const finals = await finalCounts(pool, sqliteFile, redis.nodes[3]!.url);
    const figures = STORES.map((store) => {
      const accepted = done.reduce((sum, d) => sum + d.accepted[store], 0);
      const refused = done.reduce((sum, d) => sum + d.refused[store], 0);
      return { store, accepted, refused, final: finals[store], lost: accepted - finals[store] };
    });
    const ops = done.reduce((sum, d) => sum + d.ops, 0);
    console.log(
      [
        `read-modify-write counter: ${WORKERS} worker processes, ${ops} operations, ${paused} holders paused past their ${LEASE_MS} ms lease, ` +
          `${nodesKilled} lock nodes killed (one of 3 at a time) and restarted from their AOF, ${((performance.now() - started) / 1000).toFixed(1)} s`,
        '| store             | writes accepted | refused | counter | lost updates |',
        '|:------------------|----------------:|--------:|--------:|-------------:|',
        ...figures.map(
          (f) =>
            `| ${f.store.padEnd(17)} | ${String(f.accepted).padStart(15)} | ${String(f.refused).padStart(7)} | ${String(f.final).padStart(7)} | ${String(f.lost).padStart(12)} |`,
        ),
      ].join('\n'),
    );

    expect(ops).toBeGreaterThan(ZOMBIE_ROUNDS * 2);
    for (const f of figures) {
      if (f.store.startsWith('write-only')) {
        // The control: every round lets the zombie's write through, and the next holder's on top.
        expect({ store: f.store, lost: f.lost > 0 }).toEqual({ store: f.store, lost: true });
      } else {
        expect({ store: f.store, lost: f.lost }).toEqual({ store: f.store, lost: 0 });
        // The zombies' writes were refused: at least one per round.
        expect({ store: f.store, refused: f.refused >= paused }).toEqual({
          store: f.store,
          refused: true,
        });
      }
    }
    // 20 to 50 s on 2 cores; 95 s once with two CPU-bound processes beside the whole suite.
  }, 180_000);
});

async function finalCounts(
  pool: pg.Pool,
  sqliteFile: string,
  redisUrl: string,
): Promise<Record<StoreName, number>> {
  const pgCount = async (table: string) =>
    Number((await pool.query(`SELECT n FROM ${table} WHERE id = 1`)).rows[0].n);
  const sqlite = new Database(sqliteFile, { readonly: true });
  const sqliteCount = (table: string) =>
    (sqlite.prepare(`SELECT n FROM ${table} WHERE id = 1`).get() as { n: number }).n;
  const client = new Redis(redisUrl);
  try {
    return {
      pg: await pgCount(COUNTER_TABLES.pg),
      'typeorm-pg': await pgCount(COUNTER_TABLES['typeorm-pg']),
      'write-only-pg': await pgCount(COUNTER_TABLES['write-only-pg']),
      'better-sqlite3': sqliteCount(COUNTER_TABLES['better-sqlite3']),
      'kysely-sqlite': sqliteCount(COUNTER_TABLES['kysely-sqlite']),
      'write-only-sqlite': sqliteCount(COUNTER_TABLES['write-only-sqlite']),
      redis: Number((await client.hget(COUNTER_TABLES.redis, 'n')) ?? 0),
    };
  } finally {
    sqlite.close();
    client.disconnect();
  }
}
