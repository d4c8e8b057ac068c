/**
 * Fault scenarios, each with its expected outcome, on five real redis-server
 * nodes behind fault proxies, with lock clients in their own processes. Every
 * run's whole history goes through the checker (checker.ts); the figures are
 * printed as a table at the end. See test/chaos/README.md.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import { setTimeout as pause } from 'node:timers/promises';
import { ACQUIRE, FENCE_WRITEBACK } from '../../lib/engine/lua-scripts.js';
import {
  ChaosCluster,
  deadline,
  scriptCall,
  type ChaosClient,
  type Finished,
} from './chaos-cluster.js';
import { check, type CheckResult, violationCounts } from './checker.js';
import { buildEngine } from './engine-variants.js';
import { figureRow, reportFigures, type FigureRow } from './figures.js';
import type { TrappedLink } from './fault-proxy.js';
import { now, type OpEvent } from './history.js';

/** The clients' default lease: short, so that faults outlast it. */
const TTL = 300;
/** A lease for the sections a test needs to stay held through a fault, under any machine load. */
const LONG_TTL = 1000;
const CLOCK_NODE = 4;
const ALL_NODES = [0, 1, 2, 3, 4];
/** A step of every node's wall clock: two thirds of the default lease. */
const CLOCK_STEP = 200;
/** How long a test waits for something the clients must do soon. */
const SOON = 15_000;
const real = buildEngine('real');

let cluster: ChaosCluster;
const figures: FigureRow[] = [];

beforeAll(async () => {
  // Every node can have its wall clock stepped; the shim changes nothing until a test does.
  cluster = await ChaosCluster.start({ clockShifted: ALL_NODES });
}, 60_000);
afterAll(async () => {
  await cluster?.stop();
  reportFigures('chaos-faults', 'chaos: fault scenarios', figures);
});
beforeEach(() => cluster.reset(), 30_000);

/** Checks the run, records its figures and returns what the checker got and found. */
async function finishRun(run: string, build = 'real'): Promise<Finished> {
  const finished = await cluster.finish();
  const { result, seconds, wallClockSteps } = finished;
  figures.push(figureRow(run, build, result, seconds, wallClockSteps));
  return finished;
}

const finish = async (run: string, build?: string): Promise<CheckResult> =>
  (await finishRun(run, build)).result;

function expectNoViolations(result: CheckResult): void {
  expect(result.violations.slice(0, 5)).toEqual([]);
  expect(result.grants).toBeGreaterThan(0);
}

const completions = (client: ChaosClient, op: OpEvent['op']) =>
  cluster.events.filter((e) => e.client === client.id && e.op === op && e.type !== 'invoke');

/** Resolves once `client` has been granted `count` more locks. */
function granted(client: ChaosClient, count = 1): Promise<void> {
  const grants = () => completions(client, 'acquire').filter((e) => e.type === 'ok').length;
  const from = grants();
  return cluster.until(() => grants() >= from + count, SOON, `a grant to ${client.id}`);
}

/** The trapped connections, once every one of `traps` caught one. */
const caught = (traps: Promise<TrappedLink>[], what: string) =>
  deadline(Promise.all(traps), SOON, what);

describe('chaos: paused clients', () => {
  it('a holder paused past its lease is refused by both fenced stores when it resumes, while the unfenced counter loses an update', async () => {
    const [stale, next] = await cluster.startClients(2, { engine: real });
    const resource = 'order:paused-holder';
    // A lease long enough that the client surely reaches its pause point while it holds the lock.
    const first = stale.section({ resource, ttl: LONG_TTL, pauseAt: 'before-write' });
    await first.stopped;
    // The next holder waits out the paused one's lease, then reads and writes: under a lease no
    // stall outlasts, since a holder that finds its lock gone before writing writes nothing, and
    // then nothing would be there to refuse the paused one's writes.
    const second = await next.section({ resource, ttl: LONG_TTL }).done;
    await stale.resume();
    const late = await first.done;

    expect(second.acquired).toBe(true);
    expect(late.acquired).toBe(true);
    expect(second.token).toBeGreaterThan(late.token!);
    const staleWrites = completions(stale, 'write:sqlite').concat(
      completions(stale, 'write:redis'),
    );
    expect(staleWrites.map((e) => [e.type, e.error?.slice(0, 8)])).toEqual([
      ['fail', 'rejected'],
      ['fail', 'rejected'],
    ]);
    expect(completions(stale, 'write:control').map((e) => e.type)).toEqual(['ok']);

    const result = await finish('paused holder');
    expectNoViolations(result);
    expect(result.refusedWrites).toBe(2);
    // Both increments were acknowledged, the counter shows one: the bug fencing prevents.
    expect(result.lostControlUpdates).toBe(1);
  }, 60_000);

  it('a client paused while its acquire replies are in flight never uses that grant, and the next holder gets the next token', async () => {
    const [paused, next] = await cluster.startClients(2, { engine: real });
    const resource = 'order:replies-in-flight';
    // The acquire reaches every node and runs; the proxies hold the replies.
    const traps = cluster.trap([0, 1, 2, 3, 4], scriptCall(ACQUIRE, resource), 'replies');
    const attempt = paused.section({ resource, attempts: 0 });
    const links = await caught(traps, 'the acquire on every node');
    await paused.pause('acquire replies in flight');
    // The replies now sit in the stopped process's socket.
    for (const link of links) link.release();
    const second = await next.section({ resource }).done;
    await paused.resume();
    const outcome = await attempt.done;

    expect(outcome.acquired).toBe(false);
    expect(outcome.error).toMatch(/LockUnavailableError|LockBusyError/);
    // The nodes counted token 1 for the paused grant; it was never used, and the next grant is
    // above it (2, or more when an attempt of the next holder lost the vote and counted one too).
    expect(second.acquired).toBe(true);
    expect(second.token).toBeGreaterThan(1);
    expectNoViolations(await finish('paused with acquire replies in flight'));
  }, 60_000);

  it('a client paused between the two fencing rounds never uses the token it was settling', async () => {
    const [paused, next] = await cluster.startClients(2, { engine: real });
    const resource = 'order:between-rounds';
    // The nodes' counters disagree (as after grants that failed elsewhere), so any quorum of
    // replies disagrees and every grant needs round 2. Raised, never lowered: above them all.
    const fence = 'lock:fence';
    const base = Math.max(
      ...(await Promise.all(cluster.nodes.map((n) => n.cli('GET', fence)))).map(Number),
    );
    await Promise.all(cluster.nodes.map((n, i) => n.cli('SET', fence, base + 100 * (i + 1))));
    // Round 2 goes to the granting nodes that returned less than the highest counter.
    const traps = cluster.trap([0, 1, 2, 3, 4], scriptCall(FENCE_WRITEBACK, resource), 'requests');
    const links: TrappedLink[] = [];
    for (const trap of traps) void trap.then((link) => links.push(link));
    const attempt = paused.section({ resource, attempts: 0 });
    await deadline(Promise.race(traps), SOON, 'a write-back');
    await paused.pause('between the fencing rounds');
    cluster.disarm();
    const second = await next.section({ resource }).done;
    // The held write-backs run now, after the lease: they find the lock gone and change nothing.
    for (const link of links) link.release();
    await paused.resume();
    const outcome = await attempt.done;

    expect(outcome.acquired).toBe(false);
    expect(completions(paused, 'write:sqlite')).toEqual([]);
    // Any three of the nodes include one counting from base + 300 or more.
    expect(second.acquired).toBe(true);
    expect(second.token).toBeGreaterThan(base + 300);
    const counters = await Promise.all(cluster.nodes.map((n) => n.cli('GET', fence)));
    // The next grant's token was carried to a quorum before it was used.
    expect(counters.map(Number).filter((c) => c >= second.token!).length).toBeGreaterThanOrEqual(3);
    expectNoViolations(await finish('paused between fencing rounds'));
  }, 60_000);
});

describe('chaos: paused read-write and permit holders', () => {
  /** What the fenced stores answered `client`'s writes: outcome and the start of the error. */
  const storeAnswers = (client: ChaosClient) =>
    completions(client, 'write:sqlite')
      .concat(completions(client, 'write:redis'))
      .map((e) => [e.type, e.error?.slice(0, 8)]);
  /** The acquire completion of `client`'s grant with `token`. */
  const grantOf = (client: ChaosClient, token: number | undefined) =>
    completions(client, 'acquire').find((e) => e.type === 'ok' && e.token === token)!;

  it('a writer paused past its lease is refused by both fenced stores when it resumes, and the next writer has a higher token', async () => {
    const [stale, next] = await cluster.startClients(2, { engine: real });
    const resource = 'catalogue:paused-writer';
    const first = stale.section({
      resource,
      kind: 'write',
      ttl: LONG_TTL,
      pauseAt: 'before-write',
    });
    await first.stopped;
    // The next writer waits out the paused one's lease, then writes (a lease no stall outlasts,
    // as for the paused holder above).
    const second = await next.section({ resource, kind: 'write', ttl: LONG_TTL }).done;
    await stale.resume();
    const late = await first.done;

    expect(second.acquired).toBe(true);
    expect(late.acquired).toBe(true);
    expect(second.token).toBeGreaterThan(late.token!);
    expect(storeAnswers(stale)).toEqual([
      ['fail', 'rejected'],
      ['fail', 'rejected'],
    ]);
    const result = await finish('paused writer');
    expectNoViolations(result);
    expect(result.refusedWrites).toBe(2);
  }, 60_000);

  it("a reader paused past its lease holds a writer back only until that lease ends, and the writer's token is above the reader's", async () => {
    const [reader, writer] = await cluster.startClients(2, { engine: real });
    const resource = 'catalogue:paused-reader';
    const held = reader.section({ resource, kind: 'read', ttl: LONG_TTL, pauseAt: 'before-write' });
    await held.stopped;
    // Granted within its 2 s wait, which the paused reader's 1 s lease cannot outlast.
    const write = await writer.section({ resource, kind: 'write' }).done;
    await reader.resume();
    const read = await held.done;

    expect(read.acquired).toBe(true);
    expect(write.acquired).toBe(true);
    expect(write.token).toBeGreaterThan(read.token!);
    // Not before the reader's lease ended (the checker's writer-overlap says the same).
    expect(grantOf(writer, write.token).time).toBeGreaterThanOrEqual(
      grantOf(reader, read.token).validUntil!,
    );
    expect(storeAnswers(reader)).toEqual([]);
    expectNoViolations(await finish('paused reader'));
  }, 60_000);

  it("a permit holder paused past its lease frees its slot when the lease ends: the next permit takes that slot with a higher token, and the fenced stores refuse the paused holder's writes", async () => {
    const [stale, other] = await cluster.startClients(2, { engine: real });
    const resource = 'payments:paused-permit';
    const permits = 2;
    const first = stale.section({
      resource,
      kind: 'permit',
      permits,
      ttl: LONG_TTL,
      pauseAt: 'before-write',
    });
    await first.stopped;
    // The other permit stays held, extended, while a third caller waits for the paused one's slot.
    // A 2 s lease: renewed with 1 s left, it rides out the test process's delays (see the chaos
    // README); a lost one would free its slot for the third caller.
    const holding = granted(other);
    const kept = other.section({
      resource,
      kind: 'permit',
      permits,
      ttl: 2 * LONG_TTL,
      autoExtend: true,
      holdMs: 2500,
    });
    await holding;
    // It writes under a lease no stall outlasts, as the paused holder's next one does above: a
    // lost permit would write nothing, and the paused holder's writes would find nothing newer.
    const third = await other.section({ resource, kind: 'permit', permits, ttl: LONG_TTL }).done;
    await stale.resume();
    const late = await first.done;
    const extended = await kept.done;

    expect([late.acquired, extended.acquired, third.acquired]).toEqual([true, true, true]);
    expect(extended.slot).not.toBe(late.slot);
    expect(third.slot).toBe(late.slot);
    expect(third.token).toBeGreaterThan(late.token!);
    expect(storeAnswers(stale)).toEqual([
      ['fail', 'rejected'],
      ['fail', 'rejected'],
    ]);
    const result = await finish('paused permit holder');
    expectNoViolations(result);
    expect(result.refusedWrites).toBe(2);
  }, 60_000);
});

describe('chaos: node faults', () => {
  const resources = ['stock:1', 'stock:2'];

  async function contend(): Promise<ChaosClient[]> {
    const clients = await cluster.startClients(2, { engine: real });
    for (const c of clients) c.loop(2, resources, 0);
    await cluster.moreGrants(5, SOON, 'before the faults');
    return clients;
  }

  /** Raises node `i`'s fence counter past the others, so the next grants need the write-back round. */
  async function putAhead(i: number): Promise<void> {
    const key = 'lock:fence';
    const counters = await Promise.all(cluster.nodes.map((n) => n.cli('GET', key)));
    await cluster.nodes[i].cli('SET', key, Math.max(...counters.map(Number)) + 1000);
  }

  /** Resolves once `count` acquisitions invoked since `from` have failed; returns how many were granted. */
  async function failuresSince(from: number, count: number, what: string): Promise<number> {
    await cluster.until(() => cluster.acquisitionsSince(from).failed >= count, SOON, what);
    return cluster.acquisitionsSince(from).granted;
  }

  it('nodes killed during acquire and during the write-back, a minority and a majority, then restarted from their AOF: no duplicate or backwards token, no hang, recovery', async () => {
    await contend();

    // A minority dies while acquire replies are in flight: grants go on with three nodes.
    let links = await caught(cluster.trap([3, 4], [ACQUIRE.sha], 'replies'), 'acquires on 3, 4');
    await Promise.all([3, 4].map((i) => cluster.killNode(i, 'during acquire')));
    for (const link of links) link.sever();
    await cluster.moreGrants(5, SOON, 'with a minority killed');
    await Promise.all([3, 4].map((i) => cluster.restartNode(i)));
    await cluster.moreGrants(5, SOON, 'after the minority restarted');

    // A majority dies while a write-back is in flight: nothing can be granted until it is back.
    await putAhead(0);
    const writeback = cluster.trap([1, 2, 3], [FENCE_WRITEBACK.sha], 'requests');
    links = [await deadline(Promise.race(writeback), SOON, 'a write-back to 1, 2 or 3')];
    cluster.disarm();
    await Promise.all([1, 2, 3].map((i) => cluster.killNode(i, 'during write-back')));
    const down = now();
    for (const link of links) link.sever();
    expect(await failuresSince(down, 2, 'acquisitions failing with a majority down')).toBe(0);
    await Promise.all([1, 2, 3].map((i) => cluster.restartNode(i)));
    await cluster.moreGrants(5, SOON, 'after the majority restarted');

    // A majority dies during acquire, a minority during the write-back.
    links = await caught(cluster.trap([0, 1, 2], [ACQUIRE.sha], 'replies'), 'acquires on 0-2');
    await Promise.all([0, 1, 2].map((i) => cluster.killNode(i, 'during acquire')));
    for (const link of links) link.sever();
    await Promise.all([0, 1, 2].map((i) => cluster.restartNode(i)));
    await cluster.moreGrants(5, SOON, 'after the majority restarted');
    await putAhead(4);
    const minority = cluster.trap([0, 1], [FENCE_WRITEBACK.sha], 'requests');
    links = [await deadline(Promise.race(minority), SOON, 'a write-back to 0 or 1')];
    cluster.disarm();
    await Promise.all([0, 1].map((i) => cluster.killNode(i, 'during write-back')));
    for (const link of links) link.sever();
    await cluster.moreGrants(5, SOON, 'with a minority killed');
    await Promise.all([0, 1].map((i) => cluster.restartNode(i)));
    await cluster.moreGrants(5, SOON, 'after the minority restarted');

    expectNoViolations(await finish('nodes killed and restarted'));
  }, 120_000);

  it('a paused node, a blackholed node, one-way and dropped connections, and replies delayed past the lease leave tokens unique and increasing and every call bounded', async () => {
    await contend();
    await cluster.pauseNode(0, 'SIGSTOP');
    await cluster.moreGrants(5, SOON, 'with node 0 paused');
    await cluster.resumeNode(0);
    cluster.setFault(1, { kind: 'blackhole' });
    await cluster.moreGrants(5, SOON, 'with node 1 blackholed');
    cluster.setFault(1, { kind: 'pass' });
    cluster.setFault(2, { kind: 'delay', ms: TTL * 2 });
    cluster.setFault(3, { kind: 'delay', ms: TTL * 2 });
    await cluster.moreGrants(5, SOON, 'with replies from two nodes delayed past the lease');
    cluster.setFault(2, { kind: 'pass' });
    cluster.setFault(3, { kind: 'pass' });
    cluster.setFault(4, { kind: 'one-way' });
    await cluster.moreGrants(5, SOON, 'with node 4 one-way');
    cluster.setFault(4, { kind: 'pass' });
    cluster.setFault(0, { kind: 'drop' });
    await cluster.moreGrants(5, SOON, 'with node 0 dropping connections');
    cluster.setFault(0, { kind: 'pass' });
    // A majority answering too late: acquisitions fail rather than go ahead on late replies.
    for (const i of [0, 1, 2]) cluster.setFault(i, { kind: 'delay', ms: TTL * 2 });
    const delayed = now();
    const grantedLate = await failuresSince(delayed, 2, 'acquisitions failing on late replies');
    await cluster.heal();
    await cluster.moreGrants(5, SOON, 'after the delays were lifted');

    expect(grantedLate).toBe(0);
    expectNoViolations(await finish('node pause, blackhole, one-way, drop, delay'));
  }, 120_000);

  it('a node whose wall clock jumps two hours ahead drops its keys and counters early, and the lock and its tokens stay safe', async () => {
    // Counters per resource, with a lifetime (a node's one counter never expires).
    const options = { engine: real, fenceCounter: 'resource' as const, fenceCounterTtl: 3_600_000 };
    const clients = await cluster.startClients(2, options);
    const [holder] = await cluster.startClients(1, options);
    for (const c of clients) c.loop(2, resources, 0);
    await cluster.moreGrants(5, SOON, 'before the jump');
    const held = 'stock:held';
    // A 3 s lease, renewed once past the jump: a clean-clone CI run found the 1 s lease it had
    // still on only two nodes after the jump (the test process's delays, see the chaos README,
    // made its holder's renewals late), and the lock no longer held on a quorum.
    const long = holder.section({
      resource: held,
      ttl: 3 * LONG_TTL,
      autoExtend: true,
      holdMs: 3000,
    });
    await granted(holder);
    // Granted once a quorum answered; the acquire reaches every node, the one to jump too, a
    // moment later on a loaded machine (it once read empty right after the grant). Polled: the
    // nodes send no event for it.
    const onEveryNode = async () => {
      const seen = await cluster.admin.inspect(held);
      return seen.holder !== null && seen.nodes.every((n) => n.holder === seen.holder);
    };
    const until = performance.now() + SOON;
    while (!(await onEveryNode()) && performance.now() < until) await pause(20);
    const before = await cluster.admin.inspect(held);
    expect(before.held).toBe(true);
    expect(before.nodes.map((n) => n.holder)).toEqual(before.nodes.map(() => before.holder));

    const skew = Date.now();
    cluster.stepClocks([CLOCK_NODE], 2 * 3_600_000);
    expect((await cluster.nodeTime(CLOCK_NODE)) - skew).toBeGreaterThan(2 * 3_600_000 - 60_000);
    const after = await cluster.admin.inspect(held);
    // The jumped node let the key expire; the other four still hold the lock.
    expect(after.nodes[CLOCK_NODE].holder).toBeNull();
    expect(after.nodes.filter((n) => n.holder === before.holder)).toHaveLength(4);
    expect(after.held).toBe(true);
    // Its fence counters expired with the jump too: the next grant there starts a new one.
    expect(after.nodes[CLOCK_NODE].fence).toBeNull();

    await cluster.moreGrants(10, SOON, 'after the jump', resources);
    expect((await long.done).acquired).toBe(true);
    expectNoViolations(await finish('clock jump +2 h on one node'));
  }, 120_000);

  it("every node's wall clock stepped forward during 300 ms leases gives two holders at once, as the stated assumption allows: the fenced stores refuse the older holder's late writes, while the unfenced counter loses an update", async () => {
    const [first, second] = await cluster.startClients(2, { engine: real });
    const grant = (client: ChaosClient, resource: string) =>
      cluster.events.find(
        (e) =>
          e.client === client.id &&
          e.resource === resource &&
          e.op === 'acquire' &&
          e.type === 'ok',
      )!;
    // The next grant must come within the 200 ms the step takes off the lease. On a loaded
    // machine it can come later, a plain hand-off (the proxies run in this busy process), so
    // leases are tried until one overlaps; each is checked all the same.
    let overlapped: string | undefined;
    for (let attempt = 1; attempt <= 10 && overlapped === undefined; attempt++) {
      const resource = `order:clock-step-${attempt}`;
      // The first holder reads the counter, finds its lock held and stops itself before it writes.
      const early = first.section({ resource, pauseAt: 'before-write' });
      await granted(first);
      // The next one asks at once, and keeps asking while the lock stands...
      const next = second.section({ resource });
      // ...which every node now ends 200 ms before the first holder's own clock does.
      cluster.stepClocks(ALL_NODES, CLOCK_STEP);
      const overtaken = await next.done;
      if (
        await early.stopped.then(
          () => true,
          () => false,
        )
      )
        await first.resume();
      const late = await early.done;

      expect(overtaken.acquired).toBe(true);
      expect(late.acquired).toBe(true);
      expect(overtaken.token).toBeGreaterThan(late.token!);
      if (grant(second, resource).time < grant(first, resource).validUntil!) overlapped = resource;
    }
    expect(overlapped).toBeDefined();
    const lateWrites = completions(first, 'write:sqlite')
      .concat(completions(first, 'write:redis'))
      .filter((e) => e.resource === overlapped);
    expect(lateWrites.map((e) => [e.type, e.error?.slice(0, 8)])).toEqual([
      ['fail', 'rejected'],
      ['fail', 'rejected'],
    ]);

    // More leases cut short while two clients contend.
    for (const c of [first, second]) c.loop(2, resources, 0);
    for (let i = 0; i < 3; i++) {
      await cluster.moreGrants(5, SOON, 'between clock steps');
      cluster.stepClocks(ALL_NODES, CLOCK_STEP);
    }
    await cluster.moreGrants(5, SOON, 'after the clock steps');

    const { result, input } = await finishRun(`clock step +${CLOCK_STEP} ms on every node`);
    // The two holders overlapped by less than the step, and the fences kept the stores right.
    expectNoViolations(result);
    const overlaps = result.expected.filter((e) => e.kind === 'overlap');
    expect(overlaps.some((e) => e.resource === overlapped)).toBe(true);
    for (const e of overlaps)
      expect(e.message).toMatch(/expected by the stated assumption .*covered by fencing$/);
    expect(result.refusedWrites).toBeGreaterThanOrEqual(2);
    // Negative controls: the unfenced counter lost the first holder's update, and the same
    // history without the fenced stores is judged as two holders at once.
    expect(result.lostControlUpdates).toBeGreaterThanOrEqual(1);
    const unfenced = check({ ...input, stores: [] });
    expect(unfenced.violations.filter((v) => v.kind === 'overlap')).toHaveLength(overlaps.length);
    expect(unfenced.expected).toEqual([]);
    // Judged again, not run again: no seconds of its own.
    figures.push(
      figureRow('the same, judged without the fenced stores', 'real, unfenced', unfenced, 0),
    );
  }, 120_000);
});

describe('chaos: a node that lost its data', () => {
  /**
   * Nodes 3 and 4 miss four grants (blackholed), node 0 loses its data, and
   * the next grant can only come from nodes 0, 3 and 4.
   */
  async function lagWipeAndGrant(
    reseed: boolean,
  ): Promise<{ result: CheckResult; before: number[]; after: number }> {
    // Every grant before the wipe needs all three reachable nodes to answer within the node
    // timeout; full runs delay this process's proxies up to 1 s (see test/chaos/README.md):
    // 300 ms instead of 100 ms (with a lease that allows it) keeps the set-up from failing there.
    const [client] = await cluster.startClients(1, {
      engine: real,
      ttl: LONG_TTL,
      nodeTimeout: 300,
    });
    const resource = 'order:wiped';
    cluster.partition([0, 1, 2]);
    // Connected first here too: an attempt that reached only some of these nodes would count
    // there, and the grants would skip a token.
    await client.settle([0, 1, 2]);
    const before: number[] = [];
    for (let i = 0; i < 4; i++) {
      const section = await client.section({ resource }).done;
      // The whole outcome, so that a failure shows the section's error.
      expect(section).toMatchObject({ acquired: true });
      before.push(section.token!);
    }
    await cluster.heal();
    await cluster.wipeNode(0);
    if (reseed) expect(Object.values(await cluster.admin.reseedFences())).toEqual([1, 0, 0, 1, 1]);
    cluster.partition([0, 3, 4]);
    // Reconnected first, so that no attempt fails (and counts) on only some of these nodes.
    await client.settle([0, 3, 4]);
    const last = await client.section({ resource }).done;
    expect(last.acquired).toBe(true);
    const result = reseed
      ? await finish('wiped node, re-seeded')
      : await finish('wiped node, not re-seeded (control)', 'real, re-seed skipped');
    return { result, before, after: last.token! };
  }

  it('without the re-seed procedure the next grant gets a token below those granted before, and the checker reports it (negative control)', async () => {
    const { result, before, after } = await lagWipeAndGrant(false);
    // The three nodes count from where the wiped one and the two that missed the grants stand.
    expect(after).toBeLessThan(Math.max(...before));
    const counts = violationCounts(result);
    expect(counts['token-order']).toBe(1);
    // Usually a repeat too (tokens 1 to 4, then 1 or more), but not when an attempt that failed
    // on some of the nodes, on a loaded machine, made the grants skip the token it gets.
    expect(counts['duplicate-token'] ?? 0).toBe(before.includes(after) ? 1 : 0);
  }, 60_000);

  it('re-seeding with reseedFences() before the wiped node serves again keeps tokens increasing', async () => {
    const { result, before, after } = await lagWipeAndGrant(true);
    expectNoViolations(result);
    expect(after).toBeGreaterThan(Math.max(...before));
  }, 60_000);
});

describe('chaos: extension and release', () => {
  it('automatic extension keeps a section valid through a minority failing, and a majority lost aborts the lock before the holder writes', async () => {
    // With one node down and one blackholed, every extension needs all three others. Full runs
    // delay this process's proxies up to 1 s (see test/chaos/README.md), and such a delay
    // would fail every extension of a 1 s lease: the held section's 2 s lease (renewed with 1 s
    // left) rides one out, and a node timeout of 300 ms instead of 100 (so a lease of 1000 ms
    // by default, which a node timeout may be half of) lets a slow node's reply count.
    const [holder, other] = await cluster.startClients(2, {
      engine: real,
      ttl: LONG_TTL,
      nodeTimeout: 300,
    });
    const resource = 'order:extended';
    const extended = () => completions(holder, 'extend').filter((e) => e.type === 'ok').length;

    const long = holder.section({ resource, ttl: 2 * LONG_TTL, autoExtend: true, holdMs: 4000 });
    await granted(holder);
    await cluster.killNode(0, 'while extending');
    cluster.setFault(1, { kind: 'blackhole' });
    const busy = await other.section({ resource, attempts: 0 }).done;
    expect(busy.acquired).toBe(false);
    const held = await long.done;
    expect(held).toMatchObject({ acquired: true });
    if (extended() < 3) {
      // Loaded full runs failed here now and then, with the cause unknown: say what the holder saw.
      const events = cluster.events.filter((e) => e.client === holder.id);
      const seen = { held, events, stderr: holder.stderr };
      throw new Error(
        `${extended()} extensions in the hold, 3 or more expected: ${JSON.stringify(seen)}`,
      );
    }
    expect(completions(holder, 'write:sqlite').map((e) => e.type)).toEqual(['ok']);
    await cluster.heal();

    const lost = holder.section({ resource, ttl: LONG_TTL, autoExtend: true, holdMs: 1500 });
    await granted(holder);
    cluster.partition([0, 1]);
    expect((await lost.done).acquired).toBe(true);
    // The second section learned it lost the lock and wrote nothing.
    expect(completions(holder, 'write:sqlite')).toHaveLength(1);
    expect(completions(holder, 'extend').some((e) => e.type === 'fail')).toBe(true);
    await cluster.heal();
    expect((await other.section({ resource }).done).acquired).toBe(true);
    expectNoViolations(await finish('auto-extension while nodes fail'));
  }, 60_000);

  it('a release after the lease ran out does not delete the lock another client now holds', async () => {
    const [stale, holder] = await cluster.startClients(2, { engine: real });
    const resource = 'order:late-release';
    // No extension: the lease ends while the first client still sleeps under it.
    const first = stale.section({ resource, holdMs: TTL * 5 });
    await granted(stale);
    // The next holder stops itself while it holds the lock, so it cannot release before the
    // stale client does.
    const second = holder.section({ resource, ttl: LONG_TTL * 5, pauseAt: 'before-write' });
    await second.stopped;
    const before = await cluster.admin.inspect(resource);
    expect(before.held).toBe(true);

    expect((await first.done).acquired).toBe(true);
    expect(completions(stale, 'release').map((e) => [e.type, e.released])).toEqual([['ok', false]]);
    const after = await cluster.admin.inspect(resource);
    expect(after.holder).toBe(before.holder);
    // Every node that granted the current holder still holds its lease. A node where the stale
    // client's own lease had not yet run out when the holder won its quorum may lose that
    // key to the stale release: deleting its own value is what a release is for.
    const holds = (state: typeof before): boolean[] =>
      state.nodes.map((node) => node.holder === before.holder);
    expect(holds(after)).toEqual(holds(before));
    await holder.resume();
    expect((await second.done).acquired).toBe(true);
    expectNoViolations(await finish('release after expiry'));
  }, 60_000);
});
