import { Redis } from 'ioredis';
import { RedlockSemaphore, Semaphore as SingleSemaphore } from 'redis-semaphore';
import { LockEngine, readWriteLock, semaphore } from '../../lib/engine/index.js';
import type { BenchContext } from '../support/bench-context.js';
import { formatRate, formatRatio } from '../support/format.js';
import type { ReportTable, Scenario, ScenarioResult } from './scenario.js';

/** Concurrent callers of each loop. */
const CALLERS = 32;
/** The semaphore's permits in the side-by-side run. */
const PERMITS = 4;
const TTL = 10_000;

/** Cycles per second of `callers` loops of `cycle` for `ms`, after `warmupMs`. */
async function measure(
  cycle: (caller: number) => Promise<void>,
  warmupMs: number,
  ms: number,
): Promise<number> {
  let counting = false;
  let cycles = 0;
  let stop = false;
  const loops = Array.from({ length: CALLERS }, async (_, caller) => {
    while (!stop) {
      await cycle(caller);
      if (counting) cycles++;
    }
  });
  await new Promise((resolve) => setTimeout(resolve, warmupMs));
  counting = true;
  const started = performance.now();
  await new Promise((resolve) => setTimeout(resolve, ms));
  counting = false;
  const elapsed = performance.now() - started;
  stop = true;
  await Promise.all(loops);
  return (cycles * 1000) / elapsed;
}

export const sharedScenario: Scenario = {
  number: 6,
  id: 'shared',
  title: 'Read-write locks and semaphores',
  description:
    `${CALLERS} concurrent callers in one process, each acquiring and releasing in a loop. Read locks: every caller reads ` +
    'the same resource, against our plain lock on a resource per caller (no contention: the ceiling) and on one shared ' +
    `resource (one holder at a time). Semaphore: ${PERMITS} permits of one name shared by every caller, ours against ` +
    "redis-semaphore's (Semaphore on one node, RedlockSemaphore on several), each with its defaults but a 10 ms retry.",
  defaultNodes: [1, 3],
  async run(context: BenchContext): Promise<ScenarioResult> {
    const { warmupMs, measureMs } = context.timing;
    const rows: { nodes: number; figures: Record<string, number> }[] = [];
    for (const count of context.nodeCounts(this.defaultNodes)) {
      await context.reset();
      const engine = new LockEngine({ nodes: context.urls(count), ttl: TTL, checkNodes: false });
      await engine.connect();
      const figures: Record<string, number> = {};
      try {
        const catalogue = readWriteLock(engine, 'bench:catalogue');
        figures.read = await measure(
          async () => void (await (await catalogue.acquire('read')).release()),
          warmupMs,
          measureMs,
        );
        figures.plainOwn = await measure(
          async (caller) => void (await (await engine.acquire(`bench:own:${caller}`)).release()),
          warmupMs,
          measureMs,
        );
        figures.plainShared = await measure(
          async () =>
            void (await (await engine.acquire('bench:shared', { waitTimeout: 60_000 })).release()),
          warmupMs,
          measureMs,
        );
        const permits = semaphore(engine, 'bench:permits', PERMITS);
        figures.semaphore = await measure(
          async () => void (await (await permits.acquire({ waitTimeout: 60_000 })).release()),
          warmupMs,
          measureMs,
        );
      } finally {
        await engine.close();
      }
      const clients = context.urls(count).map((url) => new Redis(url));
      try {
        const options = {
          lockTimeout: TTL,
          acquireTimeout: 60_000,
          retryInterval: 10,
          refreshInterval: 0,
        };
        figures.theirs = await measure(
          async () => {
            const permit =
              count === 1
                ? new SingleSemaphore(clients[0], 'bench:theirs', PERMITS, options)
                : new RedlockSemaphore(clients, 'bench:theirs', PERMITS, options);
            await permit.acquire();
            await permit.release();
          },
          warmupMs,
          measureMs,
        );
      } finally {
        for (const client of clients) client.disconnect();
      }
      context.log(`  ${count} node(s): ${JSON.stringify(figures)}`);
      rows.push({ nodes: count, figures });
    }
    const table: ReportTable = {
      title: 'Read locks and semaphores, cycles/s',
      headers: [
        'nodes',
        'read lock, one resource',
        'plain lock, own resource',
        'plain lock, one resource',
        'read / plain own',
        `our semaphore (${PERMITS})`,
        'redis-semaphore',
        'ours / theirs',
      ],
      align: ['r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
      rows: rows.map(({ nodes, figures: f }) => [
        String(nodes),
        formatRate(f.read),
        formatRate(f.plainOwn),
        formatRate(f.plainShared),
        formatRatio(f.read, f.plainOwn),
        formatRate(f.semaphore),
        formatRate(f.theirs),
        formatRatio(f.semaphore, f.theirs),
      ]),
      notes: [
        'A read lock is a script call per node as a lock is, on one hash shared by every reader: its cost over the ceiling is the hash of the other readers it reads, not a round trip.',
        "Our waiters wake on releases (the release publishes); redis-semaphore's poll every retryInterval.",
      ],
    };
    return { tables: [table], charts: [], data: rows };
  },
};
