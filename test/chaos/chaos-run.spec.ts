/**
 * A randomized chaos run against the real engine, then the same run against
 * two broken builds (engine-variants.ts): the checker must find nothing in
 * the first and violations in each of the others.
 *
 * A run has two parts:
 * 1. Rotation: one client takes the lock again and again while the reachable
 *    majority moves ({0,1,2}, then node 3 alone, then {2,3,4}, then
 *    {0,1,3}). A build without the fencing write-back repeats a token in
 *    the last majority; a build with quorum 1 grants on the lone node, whose
 *    counter missed the first phase.
 * 2. Nemesis: three clients with two workers each contend for three
 *    resources while faults strike in a random order with random targets
 *    (seed printed; CHAOS_SEED replays one, the clients' choices included):
 *    a holder paused past its lease, a client killed, a node killed and
 *    restarted, a node paused, two nodes blackholed, replies delayed past
 *    the lease, a one-way node, dropped connections.
 *
 * The real engine gets ROUNDS rounds of the nemesis (CHAOS_SOAK=1: as many
 * as fit in CHAOS_SOAK_SECONDS, default 300), each broken build one.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { setTimeout as sleep } from 'node:timers/promises';
import { ChaosCluster, type ChaosClient } from './chaos-cluster.js';
import { type CheckResult, violationCounts } from './checker.js';
import { buildEngine, type EngineBuild, type EngineVariant } from './engine-variants.js';
import { PASS, type Fault } from './fault-proxy.js';
import { figureRow, reportFigures, type FigureRow } from './figures.js';
import { random } from './seeded.js';

const TTL = 300;
const SEED = Number(process.env.CHAOS_SEED ?? Date.now() % 1_000_000);
const SOAK = process.env.CHAOS_SOAK === '1';
const SOAK_SECONDS = Number(process.env.CHAOS_SOAK_SECONDS ?? 300);
const RESOURCES = ['stock:a', 'stock:b', 'stock:c'];
const GRANT_TIMEOUT = 20_000;
/** Rounds of the nemesis against the real engine (each runs every fault once). */
const ROUNDS = 4;
/** Rounds against each broken build: the rotation alone catches them; one round shows faults on top. */
const BROKEN_ROUNDS = 1;

let cluster: ChaosCluster;
const builds: EngineBuild[] = [];
const figures: FigureRow[] = [];

beforeAll(async () => {
  cluster = await ChaosCluster.start({ seed: SEED });
}, 60_000);
afterAll(async () => {
  await cluster?.stop();
  for (const build of builds) build.dispose();
  reportFigures('chaos-run', `chaos: randomized runs (seed ${SEED})`, figures);
});

/**
 * Part 1: one client, the reachable majority moving under it. Each phase
 * waits for the client to reconnect to the nodes that became reachable, so
 * that every attempt reaches all of them and the counters, hence the tokens
 * of each build, are the same in every run:
 *
 * | phase     | sections | real      | no-writeback | quorum 1         |
 * | --------- | -------- | --------- | ------------ | ---------------- |
 * | {0,1,2}   | 3        | 1, 2, 3   | 1, 2, 3      | 1, 2, 3          |
 * | {3}       | 2        | (refused) | (refused)    | 1, 2: duplicates |
 * | {2,3,4}   | 3        | 4, 5, 6   | 4, 5, 6      | in reply order   |
 * | {0,1,3}   | 3        | 7, 8, 9   | 6: duplicate | in reply order   |
 *
 * (No write-back: node 3 counted 3, 4, 5 in the third phase while node 2
 * gave the tokens, and nodes 0 and 1 still stand at 3.)
 */
async function rotation(client: ChaosClient): Promise<void> {
  const resource = 'stock:rotation';
  const phases: [reachable: number[], sections: number][] = [
    [[0, 1, 2], 3],
    [[3], 2],
    [[2, 3, 4], 3],
    [[0, 1, 3], 3],
  ];
  for (const [reachable, sections] of phases) {
    cluster.partition(reachable);
    await client.settle(reachable);
    for (let i = 0; i < sections; i++) {
      // Below a quorum a single attempt is enough to show what the build does.
      await client.section({ resource, ...(reachable.length < 3 ? { attempts: 0 } : {}) }).done;
    }
  }
  await cluster.heal();
}

interface Nemesis {
  readonly name: string;
  run(pick: (n: number) => number, engine: EngineBuild): Promise<void>;
}

const progress = (what: string, count = 5) => cluster.moreGrants(count, GRANT_TIMEOUT, what);

/** Picks `count` distinct node indices. */
function nodes(pick: (n: number) => number, count: number): number[] {
  const all = [0, 1, 2, 3, 4];
  const chosen: number[] = [];
  while (chosen.length < count) chosen.push(all.splice(pick(all.length), 1)[0]);
  return chosen;
}

/** A fault on the proxies of `count` random nodes, until 5 more grants came through. */
function proxyFault(name: string, count: number, fault: Fault): Nemesis {
  return {
    name,
    async run(pick) {
      const chosen = nodes(pick, count);
      for (const i of chosen) cluster.setFault(i, fault);
      await progress(`with ${name}`);
      for (const i of chosen) cluster.setFault(i, PASS);
    },
  };
}

/** The clients that contend in the nemesis part (not the rotation's). */
const looping = () => cluster.clients.filter((c) => c.alive && c.looping);

const NEMESES: readonly Nemesis[] = [
  {
    name: 'holder paused past its lease',
    async run(pick) {
      // The holders as the condition saw them: by the time the wait's promise settles, the
      // rest of the same read of client lines may have had each of them begin its release.
      let holders: ChaosClient[] = [];
      await cluster.until(
        () => (holders = looping().filter((c) => cluster.holds(c))).length > 0,
        GRANT_TIMEOUT,
        'a holder',
      );
      const holder = holders[pick(holders.length)];
      await holder.pause('SIGSTOP past the lease');
      // A pause is a stretch of time: twice the lease, so its locks expire meanwhile.
      await sleep(TTL * 2);
      await holder.resume();
      await progress('after a holder was paused');
    },
  },
  {
    name: 'client killed',
    async run(pick, engine) {
      const clients = looping();
      await clients[pick(clients.length)].kill('SIGKILL mid-run');
      const replacement = await cluster.startClient({ engine });
      replacement.loop(2, RESOURCES, 6);
      await progress('after a client was killed');
    },
  },
  {
    name: 'node killed and restarted from its AOF',
    async run(pick) {
      const [i] = nodes(pick, 1);
      await cluster.killNode(i);
      await progress('with a node killed');
      await cluster.restartNode(i);
      await progress('after the node restarted');
    },
  },
  {
    name: 'node paused',
    async run(pick) {
      const [i] = nodes(pick, 1);
      await cluster.pauseNode(i);
      await progress('with a node paused');
      await cluster.resumeNode(i);
    },
  },
  proxyFault('two nodes blackholed', 2, { kind: 'blackhole' }),
  proxyFault('replies delayed past the lease', 2, { kind: 'delay', ms: TTL * 2 }),
  proxyFault('one-way node', 1, { kind: 'one-way' }),
  proxyFault('connections dropped', 1, { kind: 'drop' }),
];

/**
 * Part 2: contention under faults, each nemesis once per round in a seeded
 * random order, for `rounds` rounds or `untilMs`. Returns the rounds run.
 */
async function nemesis(engine: EngineBuild, rounds: number, untilMs?: number): Promise<number> {
  const next = random(SEED);
  const pick = (n: number) => Math.floor(next() * n);
  const clients = await cluster.startClients(3, { engine });
  for (const c of clients) c.loop(2, RESOURCES, 6);
  await progress('before the faults', 10);
  const started = performance.now();
  let round = 0;
  for (
    ;
    round < rounds || (untilMs !== undefined && performance.now() - started < untilMs);
    round++
  ) {
    const order = [...NEMESES];
    for (let i = order.length - 1; i > 0; i--) {
      const j = pick(i + 1);
      [order[i], order[j]] = [order[j], order[i]];
    }
    for (const step of order) await step.run(pick, engine);
  }
  await cluster.heal();
  await progress('after the faults were lifted');
  return round;
}

async function chaosRun(
  variant: EngineVariant,
  rounds: number,
  untilMs?: number,
): Promise<CheckResult> {
  const engine = buildEngine(variant);
  builds.push(engine);
  await cluster.reset();
  const [client] = await cluster.startClients(1, { engine });
  await rotation(client);
  const done = await nemesis(engine, rounds, untilMs);
  const { result, seconds, wallClockSteps } = await cluster.finish();
  const run = `rotation + ${done} nemesis round${done === 1 ? '' : 's'}${untilMs ? ' (soak)' : ''}`;
  figures.push(figureRow(run, variant, result, seconds, wallClockSteps));
  return result;
}

describe('chaos: randomized runs', () => {
  it(
    'the real engine passes every check through rotating majorities and a random series of faults',
    async () => {
      const result = await chaosRun('real', ROUNDS, SOAK ? SOAK_SECONDS * 1000 : undefined);
      expect(result.violations.slice(0, 5)).toEqual([]);
      expect(result.grants).toBeGreaterThan(50);
      expect(result.faults).toBeGreaterThanOrEqual(ROUNDS * NEMESES.length + 4);
    },
    SOAK ? SOAK_SECONDS * 1000 + 240_000 : 180_000,
  );

  it.each([
    ['no-writeback', 'with the fencing write-back disabled'],
    ['quorum-1', 'with a quorum of one node'],
  ] as const)(
    'the checker catches a build %s (%s)',
    async (variant, _description) => {
      const result = await chaosRun(variant, BROKEN_ROUNDS);
      const kinds = Object.keys(violationCounts(result));
      expect(result.violations.length).toBeGreaterThan(0);
      expect(kinds.some((k) => k === 'token-order' || k === 'duplicate-token')).toBe(true);
    },
    120_000,
  );
});
