/**
 * Checks a chaos run's history: the lock clients' operations, the faults the
 * harness injected, what the fenced stores kept and what the nodes still held
 * at the end. Pure: no I/O, so it is unit-tested on hand-made histories
 * (checker.spec.ts).
 *
 * Safety, per resource:
 * - `duplicate-token`, `token-order`: tokens of the granted acquisitions are
 *   unique and strictly increasing in grant order: a grant its client had
 *   learned of before another acquisition was invoked has the smaller token.
 * - `overlap`: the holding intervals (grant to release, cut at the lock's
 *   last known validity) never overlap. One exception, reported apart as
 *   expected: the nodes expire keys by their wall clocks, so a forward step
 *   of S ms while a lease runs shortens it by up to S ms on the nodes that
 *   stepped, and the next holder may come that much early (the older lease
 *   is the lower token's, also when its holder learned of its grant last).
 *   A holder may hold on a bare majority only (a grant returns once a quorum
 *   granted, and the other nodes may have refused), so a step on 2q - n
 *   nodes (one of five, one of three) can free a quorum for the next one.
 *   Such an overlap is what the documented assumption (time sync that
 *   slews, never steps) allows; it is expected only when the fenced stores
 *   show it covered (no store violation on that resource), and then so are
 *   the refusals of the older holder's late writes. Without a fenced store
 *   it stays a violation.
 * - Holds of read-write locks and semaphore permits (an acquire whose invoke
 *   names its `kind`) are judged by shared-checker.ts instead: readers hold
 *   together, a writer holds alone, at most N permits and one per slot, and
 *   their tokens as documented (`writer-overlap`, `too-many-permits`,
 *   `slot-shared`, `write-token-order`, `read-token`, `permit-token-order`).
 *   A permit's fenced writes are keyed by its slot (`<semaphore>#<slot>`).
 * - `foreign-token`: a store was written with a token that no granted
 *   acquisition of that client returned (a token from a failed grant).
 * Fenced stores:
 * - `store-regression`: accepted tokens never go backwards.
 * - `acknowledged-write-lost`, `rejected-write-applied`, `phantom-write`,
 *   `store-final-state`: the log holds every acknowledged write once, no
 *   refused one and nothing else; the row is the last logged write.
 * - `valid-holder-rejected`: a store refused a write made and answered while
 *   the writer's lock was valid, so something with an equal or later token
 *   got there first: a broken lock.
 * Liveness and hygiene:
 * - `hang`: a call took longer than its bound (time its client was paused
 *   does not count), or never ended although its client lived on.
 * - `client-crashed`: a client exited on its own with an error, or could not
 *   close its engine or exit in time.
 * - `leaked-lock-key`, `leaked-subscriber`, `leaked-connection`: what the
 *   clients left on the nodes once they had closed their engines: a lock key
 *   that no lease will remove, a lock channel subscriber, a connection.
 *
 * The unfenced control counter is not checked, only measured: its lost
 * updates show that the harness does see what happens without a fence.
 */
import type {
  FaultEvent,
  NodeResidue,
  OpEvent,
  SharedKind,
  StoreSnapshot,
  WallClockStep,
} from './history.js';
import { checkShared } from './shared-checker.js';

export interface Violation {
  readonly kind: string;
  readonly resource?: string;
  readonly message: string;
  /** What it takes to diagnose it from a CI log (overlaps: both grants' times and the faults). */
  readonly details?: string;
}

export interface ClientFate {
  /** When the harness killed it (SIGKILL), if it did. */
  readonly killedAt?: number;
  /** Why it failed: it exited on its own with an error, or could not close or exit in time. */
  readonly crashed?: string;
}

export interface CheckInput {
  readonly events: readonly OpEvent[];
  readonly faults?: readonly FaultEvent[];
  readonly clients?: ReadonlyMap<string, ClientFate>;
  readonly stores?: readonly StoreSnapshot[];
  /** The unfenced counter's final value per resource. */
  readonly control?: ReadonlyMap<string, number>;
  readonly residue?: readonly NodeResidue[];
  /** Lock nodes (`node0`... in the faults), for the majority a clock step must reach. Default 5. */
  readonly nodes?: number;
  /** Steps of the host's wall clock, which every node on this host follows. */
  readonly hostClockSteps?: readonly WallClockStep[];
}

export interface CheckResult {
  /** Operations invoked. */
  readonly operations: number;
  readonly ok: number;
  readonly failed: number;
  readonly indeterminate: number;
  /** Granted acquisitions. */
  readonly grants: number;
  readonly faults: number;
  /** Fenced writes refused (a stale holder caught by the fence). */
  readonly refusedWrites: number;
  /** Acknowledged control increments that the counter does not show. */
  readonly lostControlUpdates: number;
  readonly violations: readonly Violation[];
  /** What the checker would report but a stated assumption allows, shown covered by fencing. */
  readonly expected: readonly Violation[];
}

export interface Operation {
  readonly invoke: OpEvent;
  readonly end: OpEvent | undefined;
  readonly outcome: 'ok' | 'fail' | 'indeterminate' | 'pending';
}

/** Pairs each invoke with its completion. */
export function operations(events: readonly OpEvent[]): Operation[] {
  const ends = new Map<string, OpEvent>();
  for (const e of events) if (e.type !== 'invoke') ends.set(`${e.client}/${e.id}`, e);
  return events
    .filter((e) => e.type === 'invoke')
    .map((invoke) => {
      const end = ends.get(`${invoke.client}/${invoke.id}`);
      return {
        invoke,
        end,
        outcome: end ? (end.type as Operation['outcome']) : 'pending',
      };
    });
}

/** Milliseconds of [from, to] during which `client` was paused by the harness. */
function pausedWithin(
  faults: readonly FaultEvent[],
  client: string,
  from: number,
  to: number,
): number {
  let paused = 0;
  for (const f of faults) {
    if (f.kind !== 'pause-client' || f.target !== client) continue;
    const start = Math.max(from, f.start);
    const end = Math.min(to, f.end ?? to);
    if (end > start) paused += end - start;
  }
  return paused;
}

interface Grant {
  readonly client: string;
  readonly acquire: number;
  readonly resource: string;
  /** A hold of a read-write lock or a semaphore's permit; absent: a lock. */
  readonly kind?: SharedKind;
  readonly slot?: number;
  readonly permits?: number;
  readonly token: number;
  /** When the acquisition was invoked. */
  readonly invoked: number;
  /** When the client learned of the grant. */
  readonly at: number;
  /** Grant to release call, cut at the last known validity. */
  end: number;
  /** The last known validity (the grant's, or a later extension's). */
  validUntil: number;
  /** When the release was called, if it was. */
  releasedAt?: number;
  /** Extensions that succeeded: when each was called, and the validity it gave. */
  readonly extensions: { readonly at: number; readonly validUntil: number }[];
}

/** When the call that set the lease behind the last known validity began (acquire or extension). */
function leaseSetFrom(g: Grant): number {
  const extension = g.extensions.find((e) => e.validUntil === g.validUntil);
  return extension?.at ?? g.invoked;
}

/** A forward step of a node's wall clock (`host`: every node's). */
interface ClockStep {
  readonly target: string;
  readonly from: number;
  readonly to: number;
  readonly ms: number;
}

function clockSteps(input: CheckInput): ClockStep[] {
  const steps: ClockStep[] = [];
  for (const f of input.faults ?? []) {
    if (f.kind === 'clock-step' && f.stepMs !== undefined && f.stepMs > 0) {
      steps.push({ target: f.target, from: f.start, to: f.end ?? f.start, ms: f.stepMs });
    }
  }
  for (const s of input.hostClockSteps ?? []) {
    if (s.ms > 0) steps.push({ target: 'host', from: s.since, to: s.at, ms: s.ms });
  }
  return steps;
}

/**
 * The nodes a clock step must strike to free a quorum for the next holder
 * when the lease stood on a bare majority only: 2q - n (the others did not
 * hold it, or refused).
 */
export function nodesToFreeQuorum(nodes: number): number {
  return 2 * (Math.floor(nodes / 2) + 1) - nodes;
}

/**
 * By how much the clock steps that may have struck between `from` and `to`
 * can have shortened a lease held on a bare majority of `nodes`: the largest
 * sum of forward steps that {@link nodesToFreeQuorum} of them all took.
 */
function majorityStep(
  steps: readonly ClockStep[],
  nodes: number,
  from: number,
  to: number,
): number {
  const perNode = new Array<number>(nodes).fill(0);
  for (const step of steps) {
    if (step.to < from || step.from > to) continue;
    if (step.target === 'host') {
      for (let i = 0; i < nodes; i++) perNode[i] += step.ms;
    } else {
      const i = Number(/^node(\d+)$/.exec(step.target)?.[1]);
      if (i >= 0 && i < nodes) perNode[i] += step.ms;
    }
  }
  perNode.sort((a, b) => b - a);
  return perNode[nodesToFreeQuorum(nodes) - 1];
}

/**
 * A lease that clock steps on a majority cut short: `later` (the higher
 * token) was granted while `earlier`'s lease still stood on its holder's
 * clock, by no more than the steps explain.
 */
interface ClockCut {
  /** The older lease: the lower token, which the nodes granted first. */
  readonly earlier: Grant;
  readonly later: Grant;
  readonly step: number;
}

/** Such a cut that two holdings overlapping show; expected only if fencing covered it. */
interface ClockOverlap extends ClockCut {
  readonly report: Violation;
}

/**
 * The clock step that explains `later` (a higher token) granted while
 * `earlier`'s lease still stood on its holder's clock; undefined if none
 * does. The older lease may be the one learned last (its reply slow to come):
 * the nodes set it before the step cut it short, and the other grant found
 * it gone. The steps must have struck while it stood, and be as long as the
 * later grant came early.
 */
function clockCut(
  earlier: Grant,
  later: Grant,
  steps: readonly ClockStep[],
  nodes: number,
): ClockCut | undefined {
  const step = majorityStep(steps, nodes, leaseSetFrom(earlier), later.at);
  return earlier.end - later.at <= step ? { earlier, later, step } : undefined;
}

function grantsOf(ops: readonly Operation[]): Grant[] {
  const grants = new Map<string, Grant>();
  for (const { invoke, end, outcome } of ops) {
    if (invoke.op !== 'acquire' || outcome !== 'ok' || !end) continue;
    grants.set(`${invoke.client}/${invoke.id}`, {
      client: invoke.client,
      acquire: invoke.id,
      resource: invoke.resource,
      kind: invoke.kind,
      slot: end.slot,
      permits: invoke.permits,
      token: end.token ?? Number.NaN,
      invoked: invoke.time,
      at: end.time,
      end: end.validUntil ?? end.time,
      validUntil: end.validUntil ?? end.time,
      extensions: [],
    });
  }
  // Extensions move the validity; the release call ends the holding.
  const released = new Map<string, number>();
  for (const { invoke, end, outcome } of ops) {
    if (invoke.lock === undefined) continue;
    const grant = grants.get(`${invoke.client}/${invoke.lock}`);
    if (!grant) continue;
    if (invoke.op === 'extend' && outcome === 'ok' && end?.validUntil !== undefined) {
      grant.end = Math.max(grant.end, end.validUntil);
      grant.validUntil = grant.end;
      grant.extensions.push({ at: invoke.time, validUntil: end.validUntil });
    } else if (invoke.op === 'release') {
      released.set(`${invoke.client}/${invoke.lock}`, invoke.time);
    }
  }
  for (const [key, at] of released) {
    const grant = grants.get(key)!;
    grant.end = Math.min(grant.end, at);
    grant.releasedAt = at;
  }
  return [...grants.values()];
}

const nameOf = (g: Grant) => `${g.client}#${g.acquire}`;

/**
 * Per resource: every token once; a grant that the client learned of before
 * another acquisition was even invoked has the smaller token (grant order,
 * as far as the history can tell it: the moment a client records its grant
 * may come late, after a pause, but never before the grant); and no grant
 * while another holding is still valid.
 */
/**
 * What an overlap report needs to be diagnosed from CI output alone: both
 * grants' times (ms from the earlier one's invocation) and the faults that
 * overlapped them.
 */
function overlapDetails(
  earlier: Grant,
  later: Grant,
  faults: readonly FaultEvent[],
  steps: readonly ClockStep[],
): string {
  const t0 = earlier.invoked;
  const ms = (t: number | undefined) => (t === undefined ? '–' : `+${(t - t0).toFixed(1)}`);
  const describe = (g: Grant) =>
    `${nameOf(g)}: invoked ${ms(g.invoked)}, granted ${ms(g.at)}, token ${g.token}, ` +
    `valid until ${ms(g.validUntil)}${g.extensions.map((e) => ` (extend at ${ms(e.at)} to ${ms(e.validUntil)})`).join('')}, ` +
    `released ${ms(g.releasedAt)}`;
  const from = Math.min(earlier.invoked, later.invoked);
  const to = Math.max(earlier.end, later.at);
  const during = faults
    .filter((f) => f.start <= to && (f.end ?? Infinity) >= from)
    .map(
      (f) => `${f.kind} ${f.target}${f.note ? ` (${f.note})` : ''} ${ms(f.start)}..${ms(f.end)}`,
    );
  const host = steps
    .filter((s) => s.target === 'host' && s.from <= to && s.to >= from)
    .map((s) => `${s.ms > 0 ? '+' : ''}${s.ms.toFixed(0)} ms ${ms(s.from)}..${ms(s.to)}`);
  return (
    `${describe(earlier)}; ${describe(later)}; faults meanwhile: ${during.join(', ') || 'none'}` +
    (host.length > 0 ? `; host wall-clock steps meanwhile: ${host.join(', ')}` : '')
  );
}

function checkGrants(
  grants: readonly Grant[],
  violations: Violation[],
  faults: readonly FaultEvent[],
  steps: readonly ClockStep[],
  nodes: number,
  clockOverlaps: ClockOverlap[],
  clockCuts: ClockCut[],
): void {
  const byResource = new Map<string, Grant[]>();
  for (const g of grants) {
    const list = byResource.get(g.resource) ?? [];
    list.push(g);
    byResource.set(g.resource, list);
  }
  for (const [resource, list] of byResource) {
    const seen = new Map<number, Grant>();
    for (const g of list) {
      if (!Number.isSafeInteger(g.token) || g.token <= 0) {
        violations.push({
          kind: 'bad-token',
          resource,
          message: `${nameOf(g)} got token ${g.token}`,
        });
      }
      const twin = seen.get(g.token);
      if (twin) {
        violations.push({
          kind: 'duplicate-token',
          resource,
          message: `token ${g.token} granted to ${nameOf(twin)} and again to ${nameOf(g)}`,
        });
      } else {
        seen.set(g.token, g);
      }
    }

    // Sweep the acquisitions in invocation order over the grants in the order they were learned.
    const learned = [...list].sort((a, b) => a.at - b.at);
    let highest: Grant | undefined;
    let next = 0;
    for (const g of [...list].sort((a, b) => a.invoked - b.invoked)) {
      while (next < learned.length && learned[next].at < g.invoked) {
        if (!highest || learned[next].token > highest.token) highest = learned[next];
        next++;
      }
      if (highest && g.token < highest.token) {
        violations.push({
          kind: 'token-order',
          resource,
          message: `${nameOf(g)} got token ${g.token}, below the ${highest.token} that ${nameOf(highest)} was granted before it asked`,
        });
      }
    }

    let latest: Grant | undefined;
    for (const g of learned) {
      if (latest && latest.end > g.at) {
        const overlap = latest.end - g.at;
        const report: Violation = {
          kind: 'overlap',
          resource,
          message: `${nameOf(g)} was granted ${overlap.toFixed(1)} ms before ${nameOf(latest)}'s holding ended`,
          details: overlapDetails(latest, g, faults, steps),
        };
        const cut =
          g.token < latest.token
            ? clockCut(g, latest, steps, nodes)
            : clockCut(latest, g, steps, nodes);
        if (cut) clockOverlaps.push({ ...cut, report });
        else violations.push(report);
      }
      if (!latest || g.end > latest.end) latest = g;
    }

    // Cuts that no overlap shows: the older holder learned of its grant only after the later
    // one's holding ended, and its writes then find a higher token in the stores.
    if (steps.length === 0) continue;
    const byToken = [...list].sort((a, b) => a.token - b.token);
    for (let i = 0; i < byToken.length; i++) {
      for (let j = i + 1; j < byToken.length; j++) {
        if (byToken[j].at >= byToken[i].end) continue;
        const cut = clockCut(byToken[i], byToken[j], steps, nodes);
        if (cut) clockCuts.push(cut);
      }
    }
  }
}

/**
 * Holds of read-write locks and permits, by the rules of shared-checker.ts
 * (many readers or one writer, at most N permits and one per slot, their
 * tokens as documented), and every token a whole number (a reader's may be
 * 0: no write before it).
 */
function checkSharedGrants(grants: readonly Grant[], violations: Violation[]): void {
  for (const g of grants) {
    const least = g.kind === 'read' ? 0 : 1;
    if (!Number.isSafeInteger(g.token) || g.token < least) {
      violations.push({
        kind: 'bad-token',
        resource: g.resource,
        message: `${nameOf(g)} (${g.kind}) got token ${g.token}`,
      });
    }
  }
  const holdings = grants.map((g) => ({
    holder: nameOf(g),
    resource: g.resource,
    kind: g.kind!,
    asked: g.invoked,
    granted: g.at,
    end: g.end,
    token: g.token,
    slot: g.slot,
    permits: g.permits,
  }));
  violations.push(...checkShared(holdings));
}

/** A refused write a holder made while its lock was valid: a fault, unless a clock step excuses it. */
interface ValidRefusal {
  readonly client: string;
  readonly lock: number | undefined;
  readonly report: Violation;
}

function checkStore(
  store: StoreSnapshot,
  ops: readonly Operation[],
  grants: readonly Grant[],
  violations: Violation[],
  validRefusals: ValidRefusal[],
): number {
  const writes = ops.filter((o) => o.invoke.op === `write:${store.name}`);
  const logged = new Map<string, number>();
  const last = new Map<string, number>();
  const lastEntry = new Map<string, { token: number; payload: string }>();
  for (const entry of store.log) {
    logged.set(entry.payload, (logged.get(entry.payload) ?? 0) + 1);
    const before = last.get(entry.resource);
    if (before !== undefined && entry.token <= before) {
      violations.push({
        kind: 'store-regression',
        resource: entry.resource,
        message: `${store.name} accepted token ${entry.token} after ${before}`,
      });
    }
    last.set(entry.resource, Math.max(before ?? 0, entry.token));
    lastEntry.set(entry.resource, entry);
  }
  const granted = new Set(grants.map((g) => `${g.client}/${g.token}`));
  let refused = 0;
  const written = new Set<string>();
  for (const { invoke, end, outcome } of writes) {
    const payload = invoke.payload ?? '';
    written.add(payload);
    const count = logged.get(payload) ?? 0;
    const name = `${store.name} write ${payload} (token ${invoke.token})`;
    if (!granted.has(`${invoke.client}/${invoke.token}`)) {
      violations.push({
        kind: 'foreign-token',
        resource: invoke.resource,
        message: `${name} used a token no granted acquisition of ${invoke.client} returned`,
      });
    }
    if (outcome === 'ok' && count !== 1) {
      violations.push({
        kind: 'acknowledged-write-lost',
        resource: invoke.resource,
        message: `${name} was acknowledged but is logged ${count} times`,
      });
    } else if (outcome === 'fail' && count > 0) {
      violations.push({
        kind: 'rejected-write-applied',
        resource: invoke.resource,
        message: `${name} was refused but is in the log`,
      });
    } else if (count > 1) {
      violations.push({
        kind: 'phantom-write',
        resource: invoke.resource,
        message: `${name} is logged ${count} times`,
      });
    }
    if (outcome === 'fail' && end?.error?.startsWith('rejected')) {
      refused++;
      if (end.validAtEnd) {
        validRefusals.push({
          client: invoke.client,
          lock: invoke.lock,
          report: {
            kind: 'valid-holder-rejected',
            resource: invoke.resource,
            message: `${name} was refused while its lock was still valid`,
          },
        });
      }
    }
  }
  for (const [payload] of logged) {
    if (!written.has(payload)) {
      violations.push({
        kind: 'phantom-write',
        resource: store.log.find((e) => e.payload === payload)?.resource,
        message: `${store.name} logged ${payload}, which no client wrote`,
      });
    }
  }
  for (const [resource, row] of store.rows) {
    const entry = lastEntry.get(resource);
    const expected = entry?.payload ?? null;
    if (row.payload !== expected || (entry && row.token !== entry.token)) {
      violations.push({
        kind: 'store-final-state',
        resource,
        message: `${store.name} row holds ${row.payload} (token ${row.token}), its log ends with ${expected}`,
      });
    }
  }
  return refused;
}

export function check(input: CheckInput): CheckResult {
  const faults = input.faults ?? [];
  const clients = input.clients ?? new Map<string, ClientFate>();
  const ops = operations(input.events);
  const violations: Violation[] = [];

  for (const { invoke, end, outcome } of ops) {
    const name = `${invoke.client} ${invoke.op} #${invoke.id} on ${invoke.resource}`;
    const fate = clients.get(invoke.client);
    if (outcome === 'pending') {
      if (fate?.killedAt === undefined && fate?.crashed === undefined) {
        violations.push({
          kind: 'hang',
          resource: invoke.resource,
          message: `${name} never ended`,
        });
      }
      continue;
    }
    if (invoke.bound === undefined || !end) continue;
    const took =
      end.time - invoke.time - pausedWithin(faults, invoke.client, invoke.time, end.time);
    if (took > invoke.bound) {
      violations.push({
        kind: 'hang',
        resource: invoke.resource,
        message: `${name} took ${Math.round(took)} ms (bound ${invoke.bound} ms)`,
      });
    }
  }
  for (const [client, fate] of clients) {
    if (fate.crashed !== undefined) {
      violations.push({ kind: 'client-crashed', message: `${client}: ${fate.crashed}` });
    }
  }

  const grants = grantsOf(ops);
  const clockOverlaps: ClockOverlap[] = [];
  const nodes = input.nodes ?? 5;
  const locks = grants.filter((g) => g.kind === undefined);
  const clockCuts: ClockCut[] = [];
  checkGrants(locks, violations, faults, clockSteps(input), nodes, clockOverlaps, clockCuts);
  checkSharedGrants(
    grants.filter((g) => g.kind !== undefined),
    violations,
  );
  const stores = input.stores ?? [];
  const validRefusals: ValidRefusal[] = [];
  let refusedWrites = 0;
  for (const store of stores)
    refusedWrites += checkStore(store, ops, grants, violations, validRefusals);
  const expected = judgeClockOverlaps(
    stores.length > 0,
    clockOverlaps,
    clockCuts,
    validRefusals,
    violations,
  );

  let lostControlUpdates = 0;
  if (input.control) {
    const acknowledged = new Map<string, number>();
    for (const { invoke, outcome } of ops) {
      if (invoke.op === 'write:control' && outcome === 'ok') {
        acknowledged.set(invoke.resource, (acknowledged.get(invoke.resource) ?? 0) + 1);
      }
    }
    for (const [resource, count] of acknowledged) {
      lostControlUpdates += Math.max(0, count - (input.control.get(resource) ?? 0));
    }
  }

  for (const node of input.residue ?? []) {
    if (node.lockKeys.length > 0) {
      violations.push({
        kind: 'leaked-lock-key',
        message: `${node.node} keeps ${node.lockKeys.join(', ')} beyond any lease`,
      });
    }
    if (node.subscribers > 0) {
      violations.push({
        kind: 'leaked-subscriber',
        message: `${node.node} still has ${node.subscribers} lock channel(s) with subscribers after the engines closed`,
      });
    }
    if (node.connections > 0) {
      violations.push({
        kind: 'leaked-connection',
        message: `${node.node} still has ${node.connections} client connection(s) after the engines closed`,
      });
    }
  }

  return {
    operations: ops.length,
    ok: ops.filter((o) => o.outcome === 'ok').length,
    failed: ops.filter((o) => o.outcome === 'fail').length,
    indeterminate: ops.filter((o) => o.outcome === 'indeterminate' || o.outcome === 'pending')
      .length,
    grants: grants.length,
    faults: faults.length,
    refusedWrites,
    lostControlUpdates,
    violations,
    expected,
  };
}

/** What a store violation says about the writes on its resource (undefined: on any). */
const STORE_KINDS = new Set([
  'store-regression',
  'acknowledged-write-lost',
  'rejected-write-applied',
  'phantom-write',
  'store-final-state',
]);

/**
 * Overlaps that clock steps on a majority explain, and the refusals of the
 * older holder's writes in a lease such steps cut short (with an overlap or
 * without: see checkGrants): expected where the fenced stores kept every
 * acknowledged write, in token order, and nothing else; violations where
 * there is no fenced store or one of them shows a fault.
 */
function judgeClockOverlaps(
  fenced: boolean,
  overlaps: readonly ClockOverlap[],
  cuts: readonly ClockCut[],
  refusals: readonly ValidRefusal[],
  violations: Violation[],
): Violation[] {
  const faulty = new Set(violations.filter((v) => STORE_KINDS.has(v.kind)).map((v) => v.resource));
  const covered = (resource: string | undefined) =>
    fenced && !faulty.has(resource) && !faulty.has(undefined);
  const expected: Violation[] = [];
  const olderHolders = new Map<string, ClockCut>();
  const holderOf = (cut: ClockCut) => `${cut.earlier.client}/${cut.earlier.acquire}`;
  for (const o of overlaps) {
    const step = `a forward clock step of ${o.step.toFixed(0)} ms on enough nodes to free a quorum`;
    if (covered(o.report.resource)) {
      olderHolders.set(holderOf(o), o);
      expected.push({
        ...o.report,
        message: `${o.report.message}: expected by the stated assumption (${step}), covered by fencing`,
      });
    } else {
      violations.push({
        ...o.report,
        message: `${o.report.message} (within ${step}, but no fenced store shows it covered)`,
      });
    }
  }
  for (const cut of cuts) {
    if (covered(cut.earlier.resource) && !olderHolders.has(holderOf(cut)))
      olderHolders.set(holderOf(cut), cut);
  }
  for (const r of refusals) {
    const cut = olderHolders.get(`${r.client}/${r.lock}`);
    if (cut) {
      expected.push({
        ...r.report,
        message: `${r.report.message}: the fence refused the older holder of a lease the clock step cut short (${nameOf(cut.later)} was granted in it)`,
      });
    } else {
      violations.push(r.report);
    }
  }
  return expected;
}

/** Violations counted by kind, for messages and the summary. */
export function violationCounts(result: CheckResult): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const v of result.violations) counts[v.kind] = (counts[v.kind] ?? 0) + 1;
  return counts;
}
