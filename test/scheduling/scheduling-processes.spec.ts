/**
 * Scheduled jobs and leaders across separate OS processes on three real
 * redis-server nodes (scheduling-app.ts is one instance). Three
 * configurations run side by side, so that the suite takes about as long as
 * its longest part (the two cron jobs in the same three processes):
 *
 * - a 1 s cron job whose body takes 50 ms, locked per tick with holdAtLeast,
 *   in 3 instances, two of them with their wall clocks 200 ms ahead and
 *   behind (the chaos suite's clock shim): no run of a tick begins while an
 *   earlier run's hold lasts, so a tick runs once unless its instances fired
 *   further apart than the hold (rare: a loaded machine's late timer);
 * - the same without holdAtLeast (the negative control): the late instances
 *   run the tick again once the early one released it;
 * - a leader election in 3 instances: the leader is killed (SIGKILL), paused
 *   past its lease (SIGSTOP), and closed; a new leader comes within the lease
 *   plus a round trip (at once, on close), and the work the leaders write
 *   through a fence is never accepted from two leaders interleaved.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { ChildProcess } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { buildClockShim, shiftedClockEnv } from '../chaos/clock-shim.js';
import { clockOrigin, now } from '../chaos/history.js';
import { RedisFencedStore } from '../chaos/stores.js';
import { waitForProcState } from '../../dev/processes.js';
import { spawnScript } from '../../dev/scripts.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';
import type { AppMessage } from './scheduling-app.js';

const redis = useRedisNodes(4); // three lock nodes, and one for the stores
const appScript = fileURLToPath(new URL('./scheduling-app.ts', import.meta.url));

/** Ticks each cron configuration must see run (or skipped) by all three instances. */
const TICKS = 20;
const HOLD = 900;
/**
 * The leaders' lease: long enough that a close hands over well before it would run out, even
 * when the loaded machine stalls the instances for several hundred ms (a kill and a pause
 * cost a lease each, while the cron jobs run on anyway).
 */
const LEADER_TTL = 3000;
/** The leaders' lock key: the engine's default prefix, then the election's name as a hash tag. */
const LEADER_KEY = 'lock:{scheduling-leader}';
/** A round trip and the timers around it, on a loaded two-core machine. */
const ROUND_TRIP_SLACK = 400;
const SHIFTS = [0, 200, -200];
/** How long after its grant a cron run's body may begin on a loaded machine. */
const BODY_SLACK = 200;

const messages = new EventEmitter<{ message: [AppMessage] }>();
messages.setMaxListeners(50);
const log: AppMessage[] = [];

/** Resolves with the first message (from now on, or already logged when `past`) that matches. */
function next<T extends AppMessage>(match: (m: AppMessage) => m is T, past = false): Promise<T> {
  const seen = past ? log.find(match) : undefined;
  if (seen) return Promise.resolve(seen as T);
  return new Promise((resolve) => {
    const listener = (m: AppMessage) => {
      if (!match(m)) return;
      messages.off('message', listener);
      resolve(m);
    };
    messages.on('message', listener);
  });
}

class Instance {
  private readonly exited: Promise<void>;
  stderr = '';

  constructor(
    readonly id: string,
    readonly child: ChildProcess,
  ) {
    this.exited = new Promise((resolve) => child.once('exit', () => resolve()));
    let buffer = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      buffer += chunk.toString();
      let end: number;
      while ((end = buffer.indexOf('\n')) >= 0) {
        const line = buffer.slice(0, end);
        buffer = buffer.slice(end + 1);
        if (!line.startsWith('{')) continue;
        const message = JSON.parse(line) as AppMessage;
        log.push(message);
        messages.emit('message', message);
      }
    });
    child.stderr!.on('data', (chunk: Buffer) => (this.stderr += chunk.toString()));
  }

  ready(): Promise<unknown> {
    const id = this.id;
    return Promise.race([
      next((m): m is AppMessage => m.type === 'ready' && m.id === id, true),
      this.exited.then(() => {
        throw new Error(`instance ${id} exited before it was ready:\n${this.stderr}`);
      }),
    ]);
  }

  async kill(): Promise<void> {
    this.child.kill('SIGKILL');
    await this.exited;
  }

  async pause(): Promise<void> {
    this.child.kill('SIGSTOP');
    await waitForProcState(this.child.pid, (s) => s === 'T', this.id);
  }

  async resume(): Promise<void> {
    this.child.kill('SIGCONT');
    await waitForProcState(this.child.pid, (s) => s !== 'T', this.id);
  }

  /** Closes the application (its shutdown hooks run); resolves when the process is gone. */
  async close(): Promise<void> {
    this.child.stdin!.write('close\n');
    await this.exited;
  }

  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    this.child.kill('SIGCONT');
    this.child.kill('SIGKILL');
    await this.exited;
  }
}

let dir: string;
let shim: string;
const instances: Instance[] = [];

function start(id: string, args: string[], shiftMs = 0): Instance {
  const clock = shiftMs === 0 ? {} : shiftedClockEnv(shim, join(dir, `clock-${id}`), shiftMs);
  const child = spawnScript(appScript, {
    args: [
      '--id',
      id,
      '--nodes',
      redis.nodes
        .slice(0, 3)
        .map((n) => n.url)
        .join(','),
      '--store',
      redis.nodes[3].url,
      '--clock-origin',
      String(clockOrigin()),
      ...args,
    ],
    env: clock,
    dieWithParent: true,
  });
  const instance = new Instance(id, child);
  instances.push(instance);
  return instance;
}

/**
 * When a lock's lease runs out on a quorum (2 of the 3 lock nodes) if nobody renews or
 * releases it, on this process's clock: no later than that (each PTTL is read after the start).
 */
async function leaseEndOnQuorum(key: string): Promise<number> {
  const start = now();
  const left = await Promise.all(redis.nodes.slice(0, 3).map((node) => node.cli('PTTL', key)));
  return start + left.map(Number).sort((a, b) => a - b)[1];
}

/** One tick of a cron job: the instances that ran it (and when each run began) and those that skipped it. */
interface Tick {
  ran: string[];
  starts: number[];
  skipped: string[];
}

/** Per tick of a cron job: who ran it, when, and who skipped it. */
function ticksOf(job: string): Map<number, Tick> {
  const ticks = new Map<number, Tick>();
  for (const m of log) {
    if ((m.type !== 'run' && m.type !== 'skipped') || m.job !== job) continue;
    let tick = ticks.get(m.tick);
    if (!tick) ticks.set(m.tick, (tick = { ran: [], starts: [], skipped: [] }));
    if (m.type === 'skipped') tick.skipped.push(m.id);
    else {
      tick.ran.push(m.id);
      tick.starts.push(m.started);
    }
  }
  return ticks;
}

/** The ticks that every one of the three instances of `job` either ran or skipped. */
function completeTicks(job: string): [number, Tick][] {
  return [...ticksOf(job)].filter(([, t]) => t.ran.length + t.skipped.length === 3);
}

describe('scheduled jobs and leaders across processes', () => {
  let cronStarted = 0;
  let cron: Instance[] = [];
  let leaders: Instance[] = [];

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'redis-lock-scheduling-'));
    shim = buildClockShim(dir);
    // All six at once: starting a process is most of this suite's time on a busy machine. Each
    // cron instance runs both jobs, with and without the hold, on the same clock.
    cron = SHIFTS.map((shift, i) =>
      start(`cron-${i}`, ['--mode', 'cron', '--hold', String(HOLD)], shift),
    );
    leaders = ['l1', 'l2', 'l3'].map((id) =>
      start(id, ['--mode', 'leader', '--ttl', String(LEADER_TTL)]),
    );
    await Promise.all([...cron, ...leaders].map((i) => i.ready()));
    cronStarted = now();
  }, 120_000);

  afterAll(async () => {
    await Promise.all(instances.map((i) => i.stop()));
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('elects a new leader within the lease after a kill and a pause, at once after a close; the fence never takes two leaders interleaved', async () => {
    const isElected = (m: AppMessage): m is Extract<AppMessage, { type: 'elected' }> =>
      m.type === 'elected';
    const first = await next(isElected, true);
    const byId = (id: string) => leaders.find((l) => l.id === id)!;
    const figures: Record<string, number> = {};

    // kill -9: the lease runs out on the nodes, and a follower takes over.
    const afterKill = next(isElected);
    const killed = now();
    await byId(first.id).kill();
    const second = await afterKill;
    figures.killToLeader = second.at - killed;
    expect(second.id).not.toBe(first.id);
    expect(second.epoch).toBeGreaterThan(first.epoch);
    expect(figures.killToLeader).toBeLessThanOrEqual(LEADER_TTL + ROUND_TRIP_SLACK);

    // SIGSTOP past its lease: the other follower takes over; the paused leader, resumed, learns
    // it lost, and whatever it still writes with its old epoch is refused.
    const afterPause = next(isElected);
    const paused = now();
    await byId(second.id).pause();
    const third = await afterPause;
    figures.pauseToLeader = third.at - paused;
    expect(third.id).not.toBe(second.id);
    expect(third.epoch).toBeGreaterThan(second.epoch);
    expect(figures.pauseToLeader).toBeLessThanOrEqual(LEADER_TTL + ROUND_TRIP_SLACK);
    const lost = next(
      (m): m is Extract<AppMessage, { type: 'retired' }> =>
        m.type === 'retired' && m.id === second.id && m.epoch === second.epoch,
    );
    await byId(second.id).resume();
    expect((await lost).reason).toBe('lost');

    // close: the leader steps down in its shutdown hooks, and the resumed instance (the only
    // one left contending) takes over at once: before the lease would have run out on a quorum
    // of the nodes (read just before the close; renewals only move that later).
    const afterClose = next(isElected);
    const leaseEnd = await leaseEndOnQuorum(LEADER_KEY);
    const closing = now();
    await byId(third.id).close();
    const fourth = await afterClose;
    figures.closeToLeader = fourth.at - closing;
    figures.leaseLeftAtClose = leaseEnd - closing;
    const closeSeen = log.find((m) => m.type === 'closing' && m.id === third.id);
    const steppedDown = log.find((m) => m.type === 'retired' && m.id === third.id);
    figures.closeSeen = (closeSeen?.at ?? NaN) - closing;
    figures.steppedDown = (steppedDown?.at ?? NaN) - closing;
    expect(fourth.id).toBe(second.id);
    expect(fourth.epoch).toBeGreaterThan(third.epoch);
    // Renewed at half the lease, so at least about half of it was left.
    expect(figures.leaseLeftAtClose).toBeGreaterThan(LEADER_TTL / 3);
    expect(fourth.at).toBeLessThan(leaseEnd);
    expect(log).toContainEqual(
      expect.objectContaining({ type: 'retired', id: third.id, reason: 'closed' }),
    );

    // Let the last leader write until the log holds more than ten accepted writes (awaited, not
    // timed: a busy machine writes fewer per second), then stop it.
    const acceptedSoFar = () => log.filter((m) => m.type === 'work' && m.seq !== undefined).length;
    do {
      await next(
        (m): m is AppMessage => m.type === 'work' && m.id === fourth.id && m.seq !== undefined,
      );
    } while (acceptedSoFar() <= 10);
    await byId(fourth.id).stop();

    // The fence's order of accepted writes: epochs never go back, so no leader's write was
    // accepted after a newer leader's.
    const work = log.filter(
      (m): m is Extract<AppMessage, { type: 'work' }> => m.type === 'work' && m.seq !== undefined,
    );
    const accepted = [...work].sort((a, b) => a.seq! - b.seq!);
    const epochs = accepted.map((w) => w.epoch);
    expect(epochs).toEqual([...epochs].sort((a, b) => a - b));
    expect(new Set(epochs)).toEqual(
      new Set([first, second, third, fourth].map((e) => e.epoch).filter((e) => epochs.includes(e))),
    );
    expect(accepted.length).toBeGreaterThan(10);
    const elections = log.filter(isElected).length;
    expect(elections).toBe(4);
    const refused = log.filter((m) => m.type === 'work' && m.seq === undefined).length;
    console.log(
      `Leaders: ${elections} elections (lease ${LEADER_TTL} ms); new leader ${Math.round(figures.killToLeader)} ms after kill -9, ` +
        `${Math.round(figures.pauseToLeader)} ms after SIGSTOP, ${Math.round(figures.closeToLeader)} ms after close ` +
        `(heard after ${Math.round(figures.closeSeen)} ms, stepped down after ${Math.round(figures.steppedDown)} ms; ` +
        `${Math.round(figures.leaseLeftAtClose)} ms of lease were left); ` +
        `${accepted.length} fenced writes accepted in epoch order, ${refused} refused.`,
    );
  }, 60_000);

  it(`runs each tick of a 1 s cron job once with holdAtLeast (clocks ±200 ms), never again within the hold, and more often without`, async () => {
    const enough = () =>
      completeTicks('held').length >= TICKS && completeTicks('unheld').length >= TICKS;
    if (!enough()) {
      await new Promise<void>((resolve) => {
        const listener = () => {
          if (!enough()) return;
          messages.off('message', listener);
          resolve();
        };
        messages.on('message', listener);
      });
    }
    const elapsed = now() - cronStarted;
    await Promise.all(cron.map((i) => i.stop()));

    const held = completeTicks('held');
    const unheld = completeTicks('unheld');
    const runs = (ticks: typeof held) => ticks.reduce((sum, [, t]) => sum + t.ran.length, 0);
    const doubled = (ticks: typeof held) => ticks.filter(([, t]) => t.ran.length > 1).length;

    // What the fenced store accepted agrees with what the instances said they ran.
    const store = new Redis(redis.nodes[3].url);
    try {
      const { store: snapshot } = await new RedisFencedStore(store).snapshot();
      for (const [job, ticks] of [
        ['held', held],
        ['unheld', unheld],
      ] as const) {
        for (const [tick, t] of ticks) {
          const written = snapshot.log.filter((e) => e.resource === `${job}:${tick}`).length;
          // Without the hold, a tick's runs overlap under load, and the fenced store may refuse
          // the write of a run whose grant came before another's: at most one write per run.
          if (job === 'held') expect(written).toBe(t.ran.length);
          else expect(written).toBeLessThanOrEqual(t.ran.length);
        }
      }
    } finally {
      store.disconnect();
    }

    // How long after a tick's first run began each later run of it began.
    const gaps = (ticks: typeof held) =>
      ticks.flatMap(([, t]) => {
        const [first, ...later] = [...t.starts].sort((a, b) => a - b);
        return later.map((start) => Math.round(start - first));
      });
    console.log(
      `Cron, 1 s ticks, 50 ms body, 3 instances with clocks 0, +200, -200 ms (${Math.round(elapsed / 1000)} s): ` +
        `holdAtLeast ${HOLD} ms: ${held.length} ticks, ${runs(held)} runs, ${doubled(held)} double runs` +
        `${doubled(held) ? ` (begun ${gaps(held).join(', ')} ms after the first)` : ''}; ` +
        `without: ${unheld.length} ticks, ${runs(unheld)} runs, ${doubled(unheld)} double runs.`,
    );
    // The lock's part: no run of a held tick began while an earlier run's hold lasted. The body
    // begins a moment after the grant (the hold's start): up to BODY_SLACK on a loaded machine.
    for (const gap of gaps(held)) expect(gap).toBeGreaterThanOrEqual(HOLD - BODY_SLACK);
    // The machine's part: the hold covers instances that fire less than it apart (±200 ms clocks
    // and the event loops' delays). A loaded full run once fired one more than 500 ms late, and
    // that tick ran twice, after the hold, as documented; it stays rare.
    expect(doubled(held)).toBeLessThanOrEqual(held.length / 10);
    // The negative control: the same set-up without the hold runs most ticks more than once.
    expect(doubled(unheld)).toBeGreaterThanOrEqual(unheld.length / 2);
  }, 90_000);
});
