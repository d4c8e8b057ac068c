import { afterAll, describe, expect, it } from '@jest/globals';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as hold } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import {
  check,
  nodesToFreeQuorum,
  operations,
  violationCounts,
  type CheckInput,
} from './checker.js';
import { buildClockShim, shiftedClockEnv } from './clock-shim.js';
import {
  clockOrigin,
  now,
  WallClockWatch,
  type FaultEvent,
  type OpEvent,
  type StoreSnapshot,
} from './history.js';

/** Builds one client's history step by step, on a fake clock. */
class History {
  readonly events: OpEvent[] = [];
  private id = 0;

  op(
    client: string,
    op: OpEvent['op'],
    resource: string,
    from: number,
    to: number | undefined,
    outcome: 'ok' | 'fail' | 'indeterminate',
    extra: Partial<OpEvent> = {},
    end: Partial<OpEvent> = {},
  ): number {
    const id = ++this.id;
    const base = { op, client, worker: 0, id, resource };
    this.events.push({ ...base, type: 'invoke', time: from, ...extra });
    if (to !== undefined) this.events.push({ ...base, type: outcome, time: to, ...end });
    return id;
  }

  /** A fenced SQLite write on 'r' at `at`, with `token` (payload `client:token`), 1 ms long. */
  write(
    client: string,
    lock: number | undefined,
    token: number,
    at: number,
    outcome: 'ok' | 'fail',
    end: Partial<OpEvent> = {},
  ): void {
    const payload = `${client}:${token}`;
    this.op(client, 'write:sqlite', 'r', at, at + 1, outcome, { token, lock, payload }, end);
  }

  /** A grant at `at` with `token`, valid for 300 ms, released at `release`. */
  hold(client: string, resource: string, token: number, at: number, release: number): number {
    const lock = this.op(
      client,
      'acquire',
      resource,
      at - 5,
      at,
      'ok',
      {},
      {
        token,
        validUntil: at + 300,
      },
    );
    this.op(client, 'release', resource, release, release + 1, 'ok', { lock });
    return lock;
  }
}

const ALL_NODES = [0, 1, 2, 3, 4];

/** A forward step of `ms` of the wall clocks of `nodes`, at `at`. */
const clockStep = (nodes: readonly number[], ms: number, at = 120): FaultEvent[] =>
  nodes.map((i) => ({ kind: 'clock-step', target: `node${i}`, start: at, end: at, stepMs: ms }));

const kinds = (history: History, extra: Omit<CheckInput, 'events'> = {}) =>
  violationCounts(check({ events: history.events, ...extra }));

describe('chaos checker', () => {
  it('finds nothing in a clean history of hand-offs', () => {
    const h = new History();
    h.hold('c1', 'r', 1, 100, 150);
    h.hold('c2', 'r', 2, 160, 200);
    h.hold('c1', 'r', 3, 210, 250);
    h.hold('c2', 'other', 1, 120, 130);
    const result = check({ events: h.events });
    expect(result.violations).toEqual([]);
    expect(result).toMatchObject({ operations: 8, ok: 8, grants: 4 });
  });

  it('reports a token granted twice and a token that goes backwards in grant order', () => {
    const h = new History();
    h.hold('c1', 'r', 5, 100, 150);
    h.hold('c2', 'r', 5, 160, 200);
    h.hold('c1', 'r', 4, 210, 250);
    expect(kinds(h)).toEqual({ 'duplicate-token': 1, 'token-order': 1 });
  });

  it('orders grants by what the history can tell: a grant recorded late, after a pause, is no violation', () => {
    // c1 is granted token 1 at 100 but is paused before it records the grant, at 700; c2 asks at
    // 500, after c1's validity, and gets token 2, which it records at 505.
    const h = new History();
    const late = h.op('c1', 'acquire', 'r', 95, 700, 'ok', {}, { token: 1, validUntil: 395 });
    h.op('c1', 'release', 'r', 701, 702, 'ok', { lock: late });
    h.hold('c2', 'r', 2, 505, 550);
    expect(kinds(h)).toEqual({});
    // The same history with c2's token below c1's, asked for after c1 recorded its grant, is.
    const backwards = new History();
    backwards.op('c1', 'acquire', 'r', 95, 700, 'ok', {}, { token: 2, validUntil: 395 });
    backwards.hold('c2', 'r', 1, 710, 750);
    expect(kinds(backwards)).toEqual({ 'token-order': 1 });
  });

  it('reports holdings that overlap, cut at the lock validity and moved by extensions', () => {
    const h = new History();
    const first = h.hold('c1', 'r', 1, 100, 1000);
    h.hold('c2', 'r', 2, 350, 360); // c1's validity ended at 400
    expect(kinds(h)).toEqual({ overlap: 1 });
    h.op('c1', 'extend', 'r', 300, 301, 'ok', { lock: first }, { validUntil: 700 });
    expect(check({ events: h.events }).violations.map((v) => v.kind)).toEqual(['overlap']);
    // The report carries what a CI log needs to diagnose it: both grants and the faults between.
    const pause = { kind: 'pause-client', target: 'c1', start: 320, end: 340 };
    const [overlap] = check({ events: h.events, faults: [pause] }).violations;
    expect(overlap.details).toMatch(
      /^c1#\d+: invoked \+0\.0, granted .*extend at \+205\.0 to \+605\.0/,
    );
    expect(overlap.details).toMatch(
      /; c2#\d+: invoked \+250\.0.*faults meanwhile: pause-client c1 \+225\.0\.\.\+245\.0$/,
    );
    const clean = new History();
    clean.hold('c1', 'r', 1, 100, 1000);
    clean.hold('c2', 'r', 2, 450, 460);
    expect(kinds(clean)).toEqual({});
  });

  it('reports a call over its bound, minus the time its client was paused, and one that never ended', () => {
    const h = new History();
    h.op('c1', 'write:redis', 'r', 0, 5000, 'ok', { bound: 3000 });
    expect(kinds(h)).toEqual({ hang: 1 });
    const paused = { kind: 'pause-client', target: 'c1', start: 1000, end: 3500 };
    expect(kinds(h, { faults: [paused] })).toEqual({});
    h.op('c2', 'acquire', 'r', 100, undefined, 'ok', { bound: 3000 });
    expect(kinds(h, { faults: [paused] })).toEqual({ hang: 1 });
    // A client the harness killed leaves its open calls indeterminate, not hung.
    const result = check({
      events: h.events,
      faults: [paused],
      clients: new Map([['c2', { killedAt: 200 }]]),
    });
    expect(result.violations).toEqual([]);
    expect(result.indeterminate).toBe(1);
    expect(operations(h.events).map((o) => o.outcome)).toEqual(['ok', 'pending']);
  });

  function store(
    log: [string, number, string][],
    rows: [string, number, string | null][],
  ): StoreSnapshot {
    return {
      name: 'sqlite',
      log: log.map(([resource, token, payload]) => ({ resource, token, payload })),
      rows: new Map(rows.map(([r, token, payload]) => [r, { token, payload }])),
    };
  }

  it('checks a fenced store against the writes: accepted tokens only go up, acknowledged writes all kept, refused ones never', () => {
    const h = new History();
    const a = h.hold('c1', 'r', 1, 100, 150);
    h.write('c1', a, 1, 110, 'ok', { validAtEnd: true });
    const b = h.hold('c2', 'r', 2, 160, 200);
    h.write('c2', b, 2, 170, 'ok', { validAtEnd: true });
    const good = store(
      [
        ['r', 1, 'c1:1'],
        ['r', 2, 'c2:2'],
      ],
      [['r', 2, 'c2:2']],
    );
    expect(kinds(h, { stores: [good] })).toEqual({});

    const regressed = store(
      [
        ['r', 2, 'c2:2'],
        ['r', 1, 'c1:1'],
      ],
      [['r', 1, 'c1:1']],
    );
    expect(kinds(h, { stores: [regressed] })).toEqual({ 'store-regression': 1 });
    const lost = store([['r', 2, 'c2:2']], [['r', 2, 'c2:2']]);
    expect(kinds(h, { stores: [lost] })).toEqual({ 'acknowledged-write-lost': 1 });
    const phantom = store(
      [
        ['r', 1, 'c1:1'],
        ['r', 2, 'c2:2'],
        ['r', 3, 'x:9'],
      ],
      [['r', 3, 'x:9']],
    );
    expect(kinds(h, { stores: [phantom] })).toEqual({ 'phantom-write': 1 });
    const stale = store(
      [
        ['r', 1, 'c1:1'],
        ['r', 2, 'c2:2'],
      ],
      [['r', 1, 'c1:1']],
    );
    expect(kinds(h, { stores: [stale] })).toEqual({ 'store-final-state': 1 });
  });

  it('counts a refused write as the fence working, unless the writer still held a valid lock', () => {
    const h = new History();
    const a = h.hold('c1', 'r', 1, 100, 900);
    const b = h.hold('c2', 'r', 2, 500, 550);
    h.write('c2', b, 2, 510, 'ok');
    h.write('c1', a, 1, 800, 'fail', {
      error: 'rejected: a later token came first',
      validAtEnd: false,
    });
    const kept = store([['r', 2, 'c2:2']], [['r', 2, 'c2:2']]);
    const result = check({ events: h.events, stores: [kept] });
    expect(result.violations).toEqual([]);
    expect(result.refusedWrites).toBe(1);

    const valid = new History();
    const c = valid.hold('c1', 'r', 1, 100, 150);
    valid.write('c1', c, 1, 110, 'fail', { error: 'rejected', validAtEnd: true });
    expect(kinds(valid, { stores: [store([], [])] })).toEqual({ 'valid-holder-rejected': 1 });
  });

  it('judges a clock step by the older lease, the lower token, also when its holder learned of its grant last', () => {
    // c1 asks at 0 and the nodes grant it token 1 at about 5 (valid until 300 on c1's clock),
    // but its reply comes late. The nodes' clocks step 200 ms forward at 120 and drop its keys;
    // c2 asks at 205, is granted token 2 at 210, writes and releases at 230. c1 then writes, on
    // its clock still valid, and is refused. A chaos run met this under load.
    const history = (learned: number) => {
      const h = new History();
      const late = h.op('c1', 'acquire', 'r', 0, learned, 'ok', {}, { token: 1, validUntil: 300 });
      h.op('c1', 'release', 'r', 280, 281, 'ok', { lock: late });
      const b = h.hold('c2', 'r', 2, 210, 230);
      h.write('c2', b, 2, 215, 'ok', { validAtEnd: true });
      h.write('c1', late, 1, 260, 'fail', { error: 'rejected', validAtEnd: true });
      return h;
    };
    const fenced = store([['r', 2, 'c2:2']], [['r', 2, 'c2:2']]);
    const step = (ms: number, at?: number) => clockStep(ALL_NODES, ms, at);
    // Learned at 220, while c2 held it: an overlap; learned at 250, after c2's release: none,
    // but c1's write meets c2's higher token all the same.
    const overlapping = history(220);
    const after = history(250);

    const both = check({ events: overlapping.events, stores: [fenced], faults: step(200) });
    expect(both.violations).toEqual([]);
    expect(both.expected.map((e) => e.kind)).toEqual(['overlap', 'valid-holder-rejected']);
    const refused = check({ events: after.events, stores: [fenced], faults: step(200) });
    expect(refused.violations).toEqual([]);
    expect(refused.expected.map((e) => e.message)).toEqual([
      expect.stringMatching(/refused while its lock was still valid: .* cut short \(c2#\d+ was/),
    ]);
    // Without a step, with one shorter than c1's lease had left (280 - 210 ms), or with one
    // before c1 asked, c2 was granted while c1's lease stood: a broken lock.
    for (const faults of [[], step(60), step(200, -10)]) {
      expect(kinds(overlapping, { stores: [fenced], faults })).toEqual({
        overlap: 1,
        'valid-holder-rejected': 1,
      });
      expect(kinds(after, { stores: [fenced], faults })).toEqual({ 'valid-holder-rejected': 1 });
    }
  });

  it('takes an overlap no longer than a forward clock step on enough nodes to free a quorum as expected, but only where the fenced stores show it covered', () => {
    // c1 is granted at 100 (valid until 400) and stops before it writes; the nodes' clocks step
    // 200 ms forward at 120, so they drop its keys at about 200; c2 is granted at 210 and writes;
    // c1 writes at 300, while its own clock still counts the lock valid, and is refused.
    const h = new History();
    const a = h.hold('c1', 'r', 1, 100, 320);
    const b = h.hold('c2', 'r', 2, 210, 230);
    h.write('c2', b, 2, 220, 'ok', { validAtEnd: true });
    h.write('c1', a, 1, 300, 'fail', { error: 'rejected', validAtEnd: true });
    const fenced = store([['r', 2, 'c2:2']], [['r', 2, 'c2:2']]);

    const result = check({ events: h.events, stores: [fenced], faults: clockStep(ALL_NODES, 200) });
    expect(result.violations).toEqual([]);
    expect(result.expected.map((e) => e.kind)).toEqual(['overlap', 'valid-holder-rejected']);
    expect(result.expected[0].message).toMatch(
      /^c2#\d+ was granted 110\.0 ms before c1#\d+'s holding ended: expected by the stated assumption \(a forward clock step of 200 ms on enough nodes to free a quorum\), covered by fencing$/,
    );
    // Steps add up; the host's wall clock is every node's.
    expect(
      check({
        events: h.events,
        stores: [fenced],
        faults: [...clockStep(ALL_NODES, 60), ...clockStep(ALL_NODES, 60, 130)],
      }).violations,
    ).toEqual([]);
    const host = check({
      events: h.events,
      stores: [fenced],
      hostClockSteps: [{ since: 110, at: 130, ms: 150 }],
    });
    expect(host.violations).toEqual([]);
    expect(host.expected[0].details).toMatch(
      /host wall-clock steps meanwhile: \+150 ms \+15\.0\.\.\+35\.0$/,
    );

    const twoHolders = { overlap: 1, 'valid-holder-rejected': 1 };
    // One node's step explains it as well: c1's lease may have stood on three nodes only (its
    // grant returned once a quorum granted), and with one of them stepped the two that never
    // held it make a quorum with it for c2. A chaos run showed it with a jump of one node.
    expect(nodesToFreeQuorum(5)).toBe(1);
    expect(nodesToFreeQuorum(3)).toBe(1);
    expect(nodesToFreeQuorum(4)).toBe(2);
    expect(
      check({ events: h.events, stores: [fenced], faults: clockStep([4], 200) }).violations,
    ).toEqual([]);
    // A step too small does not explain the overlap, nor do steps on too few nodes.
    expect(kinds(h, { stores: [fenced], faults: clockStep(ALL_NODES, 100) })).toEqual(twoHolders);
    expect(
      kinds(h, {
        stores: [fenced],
        nodes: 4,
        faults: [...clockStep([0], 200), ...clockStep([1, 2, 3], 100)],
      }),
    ).toEqual(twoHolders);
    // Nor does one before c1's lease was set: the nodes set its expiry on the stepped clock.
    expect(kinds(h, { stores: [fenced], faults: clockStep(ALL_NODES, 200, 50) })).toEqual(
      twoHolders,
    );
    // Without a fenced store nothing shows the overlap harmless.
    expect(kinds(h, { faults: clockStep(ALL_NODES, 200) })).toEqual({ overlap: 1 });
    // An unfenced store took c1's late write over c2's: the overlap lost a write.
    const unfenced = new History();
    const c = unfenced.hold('c1', 'r', 1, 100, 320);
    const d = unfenced.hold('c2', 'r', 2, 210, 230);
    unfenced.write('c2', d, 2, 220, 'ok');
    unfenced.write('c1', c, 1, 300, 'ok');
    const overwritten = store(
      [
        ['r', 2, 'c2:2'],
        ['r', 1, 'c1:1'],
      ],
      [['r', 1, 'c1:1']],
    );
    expect(kinds(unfenced, { stores: [overwritten], faults: clockStep(ALL_NODES, 200) })).toEqual({
      overlap: 1,
      'store-regression': 1,
    });
  });

  it('reports a token that is no positive safe integer, and a failed write the store kept', () => {
    const h = new History();
    const a = h.hold('c1', 'r', 0, 100, 150);
    h.write('c1', a, 0, 110, 'fail', { error: 'SqliteError: database is locked' });
    const kept = store([['r', 0, 'c1:0']], [['r', 0, 'c1:0']]);
    expect(kinds(h, { stores: [kept] })).toEqual({ 'bad-token': 1, 'rejected-write-applied': 1 });
  });

  it('reports a write made with a token no granted acquisition returned', () => {
    const h = new History();
    h.op('c1', 'acquire', 'r', 0, 10, 'fail', {}, { error: 'LockUnavailableError' });
    h.write('c1', undefined, 7, 20, 'ok');
    expect(kinds(h, { stores: [store([['r', 7, 'c1:7']], [['r', 7, 'c1:7']])] })).toEqual({
      'foreign-token': 1,
    });
  });

  it('judges holds of read-write locks and permits by their kind: readers together pass, a writer among them or a third permit of two does not', () => {
    const shared = (
      h: History,
      client: string,
      kind: 'read' | 'write' | 'permit',
      token: number,
      at: number,
      release: number,
      slot?: number,
    ) => {
      const resource = kind === 'permit' ? 's' : 'rw';
      const extra = kind === 'permit' ? { kind, permits: 2 } : { kind };
      const end = { token, validUntil: at + 300, ...(slot ? { slot } : {}) };
      const lock = h.op(client, 'acquire', resource, at - 5, at, 'ok', extra, end);
      h.op(client, 'release', resource, release, release + 1, 'ok', { lock });
    };
    const clean = new History();
    // Two readers at once (the first before any write, token 0), a writer after both, a reader after it.
    shared(clean, 'c1', 'read', 0, 10, 100);
    shared(clean, 'c2', 'read', 0, 20, 110);
    shared(clean, 'c3', 'write', 3, 120, 200);
    shared(clean, 'c1', 'read', 3, 210, 250);
    // Two permits at once in their own slots, then slot 1 again with a higher token.
    shared(clean, 'c1', 'permit', 1, 10, 100, 1);
    shared(clean, 'c2', 'permit', 1, 20, 150, 2);
    shared(clean, 'c3', 'permit', 2, 110, 200, 1);
    // A permit whose grant was learnt only after its validity ended (the holder's process was
    // held up): it is valid at no moment, so it counts against no limit.
    const late = clean.op(
      'c2',
      'acquire',
      's',
      295,
      300,
      'ok',
      { kind: 'permit', permits: 2 },
      {
        token: 2,
        validUntil: 299,
        slot: 2,
      },
    );
    clean.op('c2', 'release', 's', 301, 302, 'ok', { lock: late });
    expect(kinds(clean)).toEqual({});

    const broken = new History();
    shared(broken, 'c1', 'read', 0, 10, 100);
    shared(broken, 'c2', 'write', 1, 50, 150);
    shared(broken, 'c1', 'permit', 1, 10, 100, 1);
    shared(broken, 'c2', 'permit', 2, 20, 100, 2);
    shared(broken, 'c3', 'permit', 3, 30, 100, 1);
    shared(broken, 'c3', 'read', 1.5, 400, 450);
    expect(kinds(broken)).toEqual({
      'writer-overlap': 1,
      'too-many-permits': 1,
      'slot-shared': 1,
      'bad-token': 1,
    });
  });

  it('measures lost updates of the unfenced counter without calling them violations', () => {
    const h = new History();
    h.op('c1', 'write:control', 'r', 0, 1, 'ok', { value: 1 });
    h.op('c2', 'write:control', 'r', 2, 3, 'ok', { value: 1 });
    const result = check({ events: h.events, control: new Map([['r', 1]]) });
    expect(result.lostControlUpdates).toBe(1);
    expect(result.violations).toEqual([]);
  });

  it('reports lock keys, subscribers and connections left on the nodes, and a client that crashed', () => {
    const result = check({
      events: [],
      clients: new Map([['c1', { crashed: 'exited (70): unhandled rejection' }]]),
      residue: [
        { node: 'node0', lockKeys: ['lock:{r}'], subscribers: 1, connections: 2 },
        { node: 'node1', lockKeys: [], subscribers: 0, connections: 0 },
      ],
    });
    expect(violationCounts(result)).toEqual({
      'client-crashed': 1,
      'leaked-lock-key': 1,
      'leaked-subscriber': 1,
      'leaked-connection': 1,
    });
  });
});

describe('the shared time line', () => {
  const dir = mkdtempSync(join(tmpdir(), 'redis-lock-timeline-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const historyModule = fileURLToPath(new URL('./history.ts', import.meta.url));
  /**
   * How each process stamped its events before: its start-up wall clock plus its own monotonic
   * time. This process's start-up is taken just before the other one starts (`started()`), so
   * that only the other's shifted clock sets them apart, not a step of the host's wall clock
   * since this Jest worker began (a paused VM moves it by seconds).
   */
  let origin = performance.timeOrigin;
  const started = () => (origin = Date.now() - performance.now());
  const perProcess = () => origin + performance.now();

  /**
   * A second process whose wall clock is 250 ms behind this one's, as when
   * the host's clock was stepped between the two starts. On a line, it
   * stamps an acquisition granted and a release, on both time lines.
   */
  async function skewedProcess() {
    const shim = buildClockShim(dir);
    const script = `
      import { createInterface } from 'node:readline';
      const { now, setClockOrigin } = await import(${JSON.stringify(`file://${historyModule}`)});
      setClockOrigin(BigInt(process.argv[1]));
      const old = () => performance.timeOrigin + performance.now();
      console.log('ready');
      for await (const _ of createInterface({ input: process.stdin })) {
        const invoked = [now(), old()], granted = [now(), old()], released = [now(), old()];
        console.log(JSON.stringify({ invoked, granted, released }));
      }`;
    const { NODE_OPTIONS: _jest, ...env } = process.env;
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', '--input-type=module', '-e', script, String(clockOrigin())],
      {
        env: { ...env, ...shiftedClockEnv(shim, join(dir, 'shift'), -250) },
        stdio: ['pipe', 'pipe', 'inherit'],
      },
    );
    const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
    expect((await lines.next()).value).toBe('ready');
    return {
      async acquireAndRelease(): Promise<
        Record<'invoked' | 'granted' | 'released', [number, number]>
      > {
        child.stdin.write('go\n');
        const line = (await lines.next()).value as string;
        child.stdin.end();
        await once(child, 'close');
        return JSON.parse(line);
      },
    };
  }

  it('keeps two holders that followed each other apart although their processes disagree about the wall clock, which per-process time bases turned into an overlap', async () => {
    started();
    const other = await skewedProcess();
    const stamp = () => [now(), perProcess()] as const;
    // c1, here, holds the lock for half a second and releases it; only then is c2, there, granted.
    const invoked = stamp();
    const granted = stamp();
    await hold(500);
    const released = stamp();
    const c2 = await other.acquireAndRelease();

    /** The two holdings, stamped on the shared time line (0) or per process (1). */
    const history = (line: 0 | 1): OpEvent[] => {
      const base = { worker: 0, resource: 'r' };
      return [
        { ...base, client: 'c1', id: 1, op: 'acquire', type: 'invoke', time: invoked[line] },
        {
          ...base,
          client: 'c1',
          id: 1,
          op: 'acquire',
          type: 'ok',
          time: granted[line],
          token: 1,
          validUntil: granted[line] + 2000,
        },
        {
          ...base,
          client: 'c1',
          id: 2,
          op: 'release',
          type: 'invoke',
          time: released[line],
          lock: 1,
        },
        { ...base, client: 'c1', id: 2, op: 'release', type: 'ok', time: released[line], lock: 1 },
        { ...base, client: 'c2', id: 1, op: 'acquire', type: 'invoke', time: c2.invoked[line] },
        {
          ...base,
          client: 'c2',
          id: 1,
          op: 'acquire',
          type: 'ok',
          time: c2.granted[line],
          token: 2,
          validUntil: c2.granted[line] + 2000,
        },
        {
          ...base,
          client: 'c2',
          id: 2,
          op: 'release',
          type: 'invoke',
          time: c2.released[line],
          lock: 1,
        },
        {
          ...base,
          client: 'c2',
          id: 2,
          op: 'release',
          type: 'ok',
          time: c2.released[line],
          lock: 1,
        },
      ];
    };
    // The per-process stamps put c2's grant about 250 ms early, inside c1's holding.
    expect(violationCounts(check({ events: history(1) }))).toEqual({ overlap: 1 });
    expect(check({ events: history(0) }).violations).toEqual([]);
    expect(c2.granted[0]).toBeGreaterThan(released[0]);
  }, 30_000);

  it('sees steps of the wall clock against the monotonic clock, and ignores a sample taken while descheduled', () => {
    let mono = 0;
    let wall = 1_000_000;
    /** Each read advances the monotonic clock by `read` ms (0: instantly). */
    let read = 0;
    const watch = new WallClockWatch(100, 5, {
      mono: () => (mono += read),
      wall: () => wall,
    });
    const after = (monoMs: number, wallMs: number) => {
      mono += monoMs;
      wall += wallMs;
      watch.sample();
    };
    watch.sample();
    after(100, 100);
    after(100, 140);
    after(100, 70);
    // Slewing and the millisecond granularity of Date.now() stay below the threshold.
    after(100, 102);
    read = 3;
    after(100, 160);
    read = 0;
    after(100, 100);
    expect(watch.steps).toEqual([
      { since: 100, at: 200, ms: 40 },
      { since: 200, at: 300, ms: -30 },
      { since: 400, at: 606, ms: 54 },
    ]);
  });
});
