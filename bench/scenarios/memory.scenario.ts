import { setTimeout } from 'node:timers/promises';
import {
  OURS,
  OURS_NO_FENCING,
  RAW,
  peers,
  type Contender,
  type ContenderSession,
} from '../contenders/index.js';
import { forceGc, type BenchContext } from '../support/bench-context.js';
import { formatCount } from '../../dev/text.js';
import { formatBytes, formatRatio } from '../support/format.js';
import { countedLoad } from '../support/lock-load.js';
import { HEADLINES, type Headlines } from '../report/targets.js';
import type { ReportTable, Scenario, ScenarioResult } from './scenario.js';

const CONCURRENCY = 32;
/** Long enough that no held lock expires while it is measured. */
const TTL = 120_000;

interface HeldRow {
  readonly contender: Contender;
  readonly nodes: number;
  readonly locks: number;
  /** Bytes of JS heap retained by the held locks. */
  readonly heap: number;
  /** Bytes of Redis used_memory, summed over the nodes. */
  readonly redis: number;
  /** Keys added on the first node. */
  readonly keys: number;
  /** used_memory over the baseline once every lock was released (all nodes). */
  readonly redisAfter: number;
  /** Keys left on the first node once every lock was released. */
  readonly keysAfter: number;
  readonly error?: string;
}

interface GrowthSample {
  readonly cycles: number;
  readonly heapUsed: number;
  readonly redisUsed: number;
  readonly keys: number;
}

function heapUsed(): number {
  forceGc();
  forceGc();
  return process.memoryUsage().heapUsed;
}

async function inParallel(count: number, body: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < count) await body(next++);
    }),
  );
}

async function measureHeld(
  context: BenchContext,
  contender: Contender,
  count: number,
  locks: number,
): Promise<HeldRow> {
  await context.reset();
  try {
    return await context.withSession(
      contender,
      count,
      { mode: 'try', ttl: TTL },
      async (session) => {
        // Warm the code paths (and the clients' buffers) before the baseline.
        await countedLoad(session, {
          concurrency: CONCURRENCY,
          total: 2000,
          keyPrefix: `mw:${contender.id}`,
          checkpoints: [],
          checkpoint: async () => undefined,
        });
        const handles = new Array<unknown>(locks).fill(null);
        const key = (i: number) => `m:${contender.id}:${i}`;
        const keys0 = await context.dbSize();
        const redis0 = await context.redisUsedMemory(count);
        const heap0 = heapUsed();
        await inParallel(locks, async (i) => {
          handles[i] = await session.acquire(key(i));
        });
        const heap1 = heapUsed();
        const redis1 = await context.redisUsedMemory(count);
        const keys1 = await context.dbSize();
        await inParallel(locks, async (i) => {
          await (session as ContenderSession<unknown>).release(handles[i], key(i));
        });
        const row = {
          contender,
          nodes: count,
          locks,
          heap: heap1 - heap0,
          redis: redis1 - redis0,
          keys: keys1 - keys0,
          redisAfter: await memoryAfterRelease(context, count, redis0, redis1 - redis0),
          keysAfter: (await context.dbSize()) - keys0,
        };
        context.log(
          `  ${count} node(s)  ${contender.label.padEnd(34)} heap ${formatBytes(row.heap)}  redis ${formatBytes(row.redis)}  keys ${row.keys} per ${locks} held locks`,
        );
        return row;
      },
    );
  } catch (error) {
    context.log(`  ${count} node(s)  ${contender.label}: FAILED ${(error as Error).message}`);
    return {
      contender,
      nodes: count,
      locks,
      heap: NaN,
      redis: NaN,
      keys: NaN,
      redisAfter: NaN,
      keysAfter: NaN,
      error: (error as Error).message,
    };
  }
}

/** How long Redis gets to give back the memory of released locks. */
const SETTLE_MS = 2000;

/**
 * used_memory over `baseline` once the locks are released: a server shrinks
 * an emptied key table in its cron (10 times a second by default), so this
 * reads again every 100 ms, up to {@link SETTLE_MS}, until the figure is
 * within 5 % of what the locks took.
 */
async function memoryAfterRelease(
  context: BenchContext,
  count: number,
  baseline: number,
  held: number,
): Promise<number> {
  const until = performance.now() + SETTLE_MS;
  for (;;) {
    const after = (await context.redisUsedMemory(count)) - baseline;
    if (after <= 0.05 * held || performance.now() >= until) return after;
    await setTimeout(100);
  }
}

async function measureGrowth(
  context: BenchContext,
  contender: Contender,
  count: number,
  total: number,
): Promise<GrowthSample[]> {
  await context.reset();
  return context.withSession(contender, count, { mode: 'try', ttl: 10_000 }, async (session) => {
    const samples: GrowthSample[] = [];
    const sample = async (cycles: number) => {
      const heap = heapUsed();
      samples.push({
        cycles,
        heapUsed: heap,
        redisUsed: await context.redisUsedMemory(count),
        keys: await context.dbSize(),
      });
      context.log(`  ${contender.label}: ${formatCount(cycles)} cycles, heap ${formatBytes(heap)}`);
    };
    // Warm-up outside the count, then a baseline sample at 0.
    await countedLoad(session, {
      concurrency: CONCURRENCY,
      total: 20_000,
      keyPrefix: `gw:${contender.id}`,
      checkpoints: [],
      checkpoint: async () => undefined,
    });
    await sample(0);
    const step = total / 5;
    await countedLoad(session, {
      concurrency: CONCURRENCY,
      total,
      keyPrefix: `g:${contender.id}`,
      checkpoints: [1, 2, 3, 4, 5].map((k) => Math.round(k * step)),
      checkpoint: sample,
    });
    return samples;
  });
}

function contenders(): Contender[] {
  return [RAW, ...peers('defaults'), OURS_NO_FENCING, OURS];
}

export const memoryScenario: Scenario = {
  number: 5,
  id: 'memory',
  title: 'Memory',
  description:
    'Held locks: the JS heap (after a forced full GC) and Redis `used_memory` (summed over the nodes) grow by this much while 10,000 locks on distinct keys are held at once. ' +
    'Growth: our engine runs many lock cycles on fresh keys; the heap is sampled after a forced GC at each fifth.',
  defaultNodes: [1, 3],
  async run(context: BenchContext): Promise<ScenarioResult> {
    const counts = context.nodeCounts(this.defaultNodes);
    const locks = context.timing.heldLocks;
    const held: HeldRow[] = [];
    for (const count of counts) {
      for (const contender of contenders())
        held.push(await measureHeld(context, contender, count, locks));
    }
    const growthNodes = Math.min(...counts);
    const growth = await measureGrowth(context, OURS, growthNodes, context.timing.growthCycles);
    await context.reset();

    const lowestPeer = (count: number, pick: (row: HeldRow) => number) => {
      const values = held
        .filter(
          (row) =>
            row.nodes === count && row.contender.kind === 'peer' && Number.isFinite(pick(row)),
        )
        .map(pick);
      return values.length > 0 ? Math.min(...values) : undefined;
    };
    const floorOf = (count: number, pick: (row: HeldRow) => number) => {
      const row = held.find((r) => r.nodes === count && r.contender.kind === 'floor');
      return row ? pick(row) : undefined;
    };
    const heldTable: ReportTable = {
      title: `Memory per ${formatCount(locks)} held locks`,
      headers: [
        'nodes',
        'library',
        'JS heap',
        '× leanest peer',
        'Redis used_memory (all nodes)',
        '× leanest peer',
        '× raw floor',
        'keys per node',
        'Redis after release',
        'keys left',
      ],
      align: ['r', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
      rows: held.map((row) => {
        if (row.error)
          return [
            String(row.nodes),
            row.contender.label,
            `failed: ${row.error}`,
            ...new Array<string>(7).fill(''),
          ];
        return [
          String(row.nodes),
          row.contender.kind === 'ours' ? `**${row.contender.label}**` : row.contender.label,
          `${formatBytes(row.heap)} (${Math.round(row.heap / row.locks)} B/lock)`,
          formatRatio(
            row.heap,
            lowestPeer(row.nodes, (r) => r.heap),
          ),
          `${formatBytes(row.redis)} (${Math.round(row.redis / row.locks)} B/lock)`,
          formatRatio(
            row.redis,
            lowestPeer(row.nodes, (r) => r.redis),
          ),
          formatRatio(
            row.redis,
            floorOf(row.nodes, (r) => r.redis),
          ),
          formatCount(row.keys),
          `${row.redisAfter < 0 ? '−' : '+'}${formatBytes(Math.abs(row.redisAfter))}`,
          formatCount(row.keysAfter),
        ];
      }),
      notes: [
        'The raw floor keeps only the random value string per lock (the caller keeps the key); its Redis figure is one bare `SET key value PX` key.',
        'Heap figures include the handle each library returns and whatever it retains for it (resource arrays, per-attempt statistics, lock objects); they are single measurements after a forced GC and vary by a few per cent.',
        'Peers with their defaults (plain clients; redis-semaphore keeps an auto-refresh timer per held lock).',
        `"Redis after release" and "keys left": used_memory (all nodes) and keys (first node) once every lock was released, against the baseline taken before they were acquired; used_memory is read again every 100 ms for up to ${SETTLE_MS / 1000} s until it is within 5 % of what the locks took, since a server shrinks an emptied key table in its cron.`,
        "With fencing on, our engine keeps one fence counter per node for all resources (`fenceCounter: 'node'`, the default), made by the first grant on the node, before the baseline here; with `fenceCounter: 'resource'` (what a Redis Cluster node uses) each resource has a counter of its own, which stays after the release until its `fenceCounterTtl` (1 hour by default) runs out.",
      ],
    };
    const headlines = (context.shared.get(HEADLINES) ?? {}) as Headlines;
    headlines.memory = counts.map((n) => {
      const ours = held.find((row) => row.nodes === n && row.contender.id === OURS.id);
      return {
        nodes: n,
        locks,
        oursHeap: ours?.heap,
        oursRedis: ours?.redis,
        oursRedisAfter: ours?.redisAfter,
        oursKeysAfter: ours?.keysAfter,
        leanestPeerHeap: lowestPeer(n, (r) => r.heap),
        leanestPeerRedis: lowestPeer(n, (r) => r.redis),
      };
    });
    const first = growth[0];
    const last = growth[growth.length - 1];
    headlines.growth = {
      cycles: last.cycles,
      heapStart: first.heapUsed,
      heapDelta: last.heapUsed - first.heapUsed,
      nodes: growthNodes,
    };
    context.shared.set(HEADLINES, headlines);
    const growthTable: ReportTable = {
      title: `Our engine over ${formatCount(context.timing.growthCycles)} lock cycles (${growthNodes} node${growthNodes > 1 ? 's' : ''}, fresh key per cycle)`,
      headers: [
        'cycles',
        'JS heap used',
        'Δ heap since 0',
        'Redis used_memory (all nodes)',
        'keys on node 1',
      ],
      align: ['r', 'r', 'r', 'r', 'r'],
      rows: growth.map((s) => [
        formatCount(s.cycles),
        formatBytes(s.heapUsed),
        formatBytes(s.heapUsed - first.heapUsed),
        formatBytes(s.redisUsed),
        formatCount(s.keys),
      ]),
      notes: [
        `Heap after ${formatCount(last.cycles)} cycles: ${formatBytes(last.heapUsed)}, ${formatBytes(last.heapUsed - first.heapUsed)} from the start (after a forced GC each time).`,
        `Redis keys after the run: ${formatCount(last.keys)} on node 1. Lock keys are deleted on release; what remains are the fence counters, one per distinct resource locked within the last \`fenceCounterTtl\` (1 hour by default; a counter created after the last one expired starts from the clock, so tokens stay monotonic). ` +
          'An application that locks many distinct names per hour (per request id, per order id) holds this many counters at a time; with `fenceCounterTtl: 0` they are kept forever.',
      ],
    };
    return {
      tables: [heldTable, growthTable],
      charts: [],
      data: {
        held: held.map(({ contender, ...rest }) => ({
          id: contender.id,
          label: contender.label,
          ...rest,
        })),
        growth,
      },
    };
  },
};
