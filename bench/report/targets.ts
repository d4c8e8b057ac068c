/**
 * The performance targets, checked against the figures of one run. Each
 * scenario leaves its headline figures in `context.shared` under
 * {@link HEADLINES}; run.ts renders the table at the top of latest.md.
 */
import { formatMs, markdownTable } from '../../dev/text.js';
import { formatBytes, formatRate } from '../support/format.js';

export const HEADLINES = 'headlines';

export interface Best {
  readonly rate: number;
  readonly label: string;
}

export interface HandoffFigures {
  readonly rate: number;
  readonly p99: number;
  readonly fairness: number;
}

/** One library in one cell of the plain loop. */
export interface PlainLoopFigures {
  readonly label: string;
  /** Cycles/s of the median round. */
  readonly rate: number;
  /** Whole-cycle latency (acquire + release), ms. */
  readonly p50: number;
  readonly p99: number;
}

/**
 * Ours / the best peer's median rate in the plain loop that each cell must
 * reach: one caller and a few at least match the best peer everywhere; a busy
 * service (32 callers) beats it by 30 % on a quorum and at least matches it
 * on one node.
 */
export function plainLoopTarget(callers: number, nodes: number): number {
  return callers >= 32 && nodes > 1 ? 1.3 : 1.0;
}

export interface Headlines {
  plainLoop?: {
    callers: number;
    nodes: number;
    ours?: PlainLoopFigures;
    best?: PlainLoopFigures;
    /** Median over rounds of ours / the fastest peer of that round. */
    paired?: number;
  }[];
  uncontended?: {
    nodes: number;
    ours?: number;
    oursAp?: number;
    bestDefaults?: Best;
    bestTuned?: Best;
    raw?: number;
    rawAp?: number;
  }[];
  handoff?: {
    nodes: number;
    ours?: HandoffFigures;
    oursEngines?: HandoffFigures;
    /** Ours with a process per worker (one engine each). */
    oursProcesses?: HandoffFigures;
    /** The best peer with a process per worker, defaults or tuned. */
    bestProcesses?: { rate: number; rateLabel: string; p99: number; p99Label: string };
    /** The in-process mutex: the floor of a hand-off within one process. */
    mutex?: HandoffFigures;
    bestDefaults?: { rate: number; rateLabel: string; p99: number; p99Label: string };
    bestTuned?: { rate: number; rateLabel: string; p99: number; p99Label: string };
  }[];
  fencing?: {
    nodes: number;
    on?: number;
    off?: number;
    onCpu?: number;
    offCpu?: number;
    /** Median over rounds of on / off, each pair measured back to back. */
    paired?: number;
  }[];
  http?: {
    nodes: number;
    platform: string;
    plain?: number;
    locked?: number;
    lockedApClients?: number;
    /** The unlocked endpoint of an app without RedisLockModule. */
    bare?: number;
    hot?: number;
    plainP99?: number;
    lockedP99?: number;
    /** Median over rounds of locked / plain, each pair measured back to back. */
    paired?: number;
    /** The same endpoint with LockService.using() in the handler instead of @Locked(). */
    byHand?: number;
    /** Median over rounds of locked / byHand. */
    pairedByHand?: number;
    /** An SQLite write without a lock, and the same write fenced under @Locked(). */
    writePlain?: number;
    writeLocked?: number;
    /** Median over rounds of writeLocked / writePlain. */
    pairedWrite?: number;
    /** The unlocked write under the raw floor's lock (no library): the most any lock keeps. */
    writeFloor?: number;
  }[];
  memory?: {
    nodes: number;
    locks: number;
    oursHeap?: number;
    oursRedis?: number;
    /** used_memory over the baseline, and keys left, once every lock was released. */
    oursRedisAfter?: number;
    oursKeysAfter?: number;
    leanestPeerHeap?: number;
    leanestPeerRedis?: number;
  }[];
  growth?: { cycles: number; heapStart: number; heapDelta: number; nodes: number };
  /** Scenario 8: the working tree's engine against an earlier commit's, per cell. */
  baseline?: {
    commit: string;
    callers: number;
    nodes: number;
    /** Median over rounds of now / then. */
    paired?: number;
    low: number;
    high: number;
  }[];
}

const ok = (v: number | undefined): v is number => v !== undefined && Number.isFinite(v);
const x = (v: number) => `${v.toFixed(2)}×`;
const pct = (v: number) => `${Math.round(v * 100)} %`;
/** The cost again as the median of rounds measured back to back (see pairedRatio). */
const pairedNote = (ratio: number | undefined) =>
  ok(ratio) ? `; median of paired rounds ${pct(1 - ratio)}` : '';
const k = (v: number) => (v >= 10_000 ? `${(v / 1000).toFixed(1)}k` : formatRate(v));

/** A ratio that must be at least `needed`. */
function atLeast(measured: number | undefined, needed: number): string {
  if (!ok(measured)) return 'not measured';
  if (measured >= needed) return `✅ met (${pct(measured / needed - 1)} above)`;
  return `❌ missed by ${pct(1 - measured / needed)} (needs ${x(needed / measured)} more)`;
}

/** A ratio that must be at most `limit`. */
function atMost(measured: number | undefined, limit: number): string {
  if (!ok(measured)) return 'not measured';
  if (measured <= limit) return `✅ met (${x(limit / measured)} under the limit)`;
  return `❌ missed: ${x(measured / limit)} the limit`;
}

/** A cost (fraction lost) that must be at most `limit`. */
function costAtMost(cost: number | undefined, limit: number): string {
  if (!ok(cost)) return 'not measured';
  if (cost <= limit) return '✅ met';
  return `❌ missed by ${Math.round((cost - limit) * 100)} points`;
}

export function renderTargets(h: Headlines): string | undefined {
  const rows: string[][] = [];
  for (const p of h.plainLoop ?? []) {
    const needed = plainLoopTarget(p.callers, p.nodes);
    const ratio = p.ours && p.best ? p.ours.rate / p.best.rate : undefined;
    rows.push([
      `Plain loop, ${p.callers} caller${p.callers > 1 ? 's' : ''}, ${p.nodes} node${p.nodes > 1 ? 's' : ''}: cycles/s × best peer (${p.best?.label ?? '–'})`,
      `≥ ${x(needed)}`,
      ok(ratio) && p.ours && p.best
        ? `${x(ratio)} (${k(p.ours.rate)} vs ${k(p.best.rate)}; p50 ${formatMs(p.ours.p50)} vs ${formatMs(p.best.p50)}${ok(p.paired) ? `; median of per-round ratios ${x(p.paired)}` : ''})`
        : '–',
      atLeast(ratio, needed),
    ]);
  }
  for (const hand of h.handoff ?? []) {
    const n = `${hand.nodes} node${hand.nodes > 1 ? 's' : ''}`;
    const { ours, mutex } = hand;
    if (ours) {
      const p99 = mutex ? ours.p99 / mutex.p99 : undefined;
      rows.push([
        `Hand-off in one process, ${n}: p99 wait × the in-process mutex's p99`,
        '≤ 1.30×',
        ok(p99) && mutex ? `${x(p99)} (${formatMs(ours.p99)} vs ${formatMs(mutex.p99)})` : '–',
        atMost(p99, 1.3),
      ]);
      rows.push([
        `Hand-off in one process, ${n}: fairness (Jain)`,
        '≥ 0.95',
        ours.fairness.toFixed(3),
        !ok(ours.fairness)
          ? 'not measured'
          : ours.fairness >= 0.95
            ? '✅ met'
            : `❌ missed by ${(0.95 - ours.fairness).toFixed(3)}`,
      ]);
    }
    const processes = hand.oursProcesses;
    const best = hand.bestProcesses;
    if (processes && hand.nodes === 3) {
      const grants = best ? processes.rate / best.rate : undefined;
      rows.push([
        `Hand-off across 8 processes (one engine each), ${n}: grants/s × best peer in 8 processes (${best?.rateLabel ?? '–'})`,
        '≥ 2.00×',
        ok(grants) && best
          ? `${x(grants)} (${formatRate(processes.rate)} vs ${formatRate(best.rate)})`
          : '–',
        atLeast(grants, 2),
      ]);
    }
  }
  for (const f of h.fencing ?? []) {
    const cost = ok(f.on) && ok(f.off) ? 1 - f.on / f.off : undefined;
    const cpuCost = ok(f.onCpu) && ok(f.offCpu) ? f.onCpu / f.offCpu - 1 : undefined;
    rows.push([
      `Fencing cost, ${f.nodes} node${f.nodes > 1 ? 's' : ''}: uncontended cycles/s lost`,
      '≤ 10 %',
      ok(cost) && ok(f.on) && ok(f.off)
        ? `${pct(cost)} (${k(f.on)} on vs ${k(f.off)} off${ok(cpuCost) ? `; CPU per cycle +${pct(cpuCost)}` : ''}${pairedNote(f.paired)})`
        : '–',
      costAtMost(cost, 0.1),
    ]);
  }
  for (const r of h.http ?? []) {
    const n = `${r.nodes} node${r.nodes > 1 ? 's' : ''}`;
    const byHand = ok(r.locked) && ok(r.byHand) ? r.locked / r.byHand : undefined;
    rows.push([
      `@Locked() vs LockService.using() by hand, ${n}, ${r.platform}: requests/s`,
      '≥ 0.97×',
      ok(byHand)
        ? `${x(byHand)} (${formatRate(r.locked!)} vs ${formatRate(r.byHand!)} req/s${ok(r.pairedByHand) ? `; median of paired rounds ${x(r.pairedByHand)}` : ''})`
        : '–',
      atLeast(byHand, 0.97),
    ]);
    const write = ok(r.writeLocked) && ok(r.writePlain) ? r.writeLocked / r.writePlain : undefined;
    rows.push([
      `Fenced SQLite write under @Locked(), ${n}, ${r.platform}: requests/s × the unlocked write`,
      '≥ 0.85×',
      ok(write)
        ? `${x(write)} (${formatRate(r.writeLocked!)} vs ${formatRate(r.writePlain!)} req/s${ok(r.pairedWrite) ? `; median of paired rounds ${x(r.pairedWrite)}` : ''}${ok(r.writeFloor) ? `; under the raw floor's lock, no library: ${x(r.writeFloor / r.writePlain!)}` : ''})`
        : '–',
      atLeast(write, 0.85),
    ]);
  }
  for (const r of (h.http ?? []).filter((r) => r.nodes === 1)) {
    const cost = ok(r.plain) && ok(r.locked) ? 1 - r.locked / r.plain : undefined;
    rows.push([
      `@Locked cost, 1 node, ${r.platform}: requests/s lost vs the unlocked endpoint`,
      '≤ 15 %',
      ok(cost) && ok(r.plain) && ok(r.locked)
        ? `${pct(cost)} (${formatRate(r.locked)} vs ${formatRate(r.plain)} req/s${pairedNote(r.paired)})`
        : '–',
      costAtMost(cost, 0.15),
    ]);
    if (ok(r.bare) && ok(r.locked)) {
      const bareCost = 1 - r.locked / r.bare;
      rows.push([
        `… the same, against the unlocked endpoint of an app without RedisLockModule`,
        '≤ 15 %',
        `${pct(bareCost)} (${formatRate(r.locked)} vs ${formatRate(r.bare)} req/s)`,
        costAtMost(bareCost, 0.15),
      ]);
    }
  }
  if (h.growth) {
    const { growth } = h;
    const change = growth.heapDelta / growth.heapStart;
    rows.push([
      `Heap over ${growth.cycles.toLocaleString('en-US')} lock cycles (${growth.nodes} node${growth.nodes > 1 ? 's' : ''}): change after a full GC`,
      '≤ 5 %',
      ok(change)
        ? `${change >= 0 ? '+' : '−'}${pct(Math.abs(change))} (${formatBytes(growth.heapStart)} → ${formatBytes(growth.heapStart + growth.heapDelta)})`
        : '–',
      ok(change)
        ? Math.abs(change) <= 0.05
          ? '✅ met'
          : `❌ missed by ${Math.round((Math.abs(change) - 0.05) * 100)} points`
        : 'not measured',
    ]);
  }
  for (const m of h.memory ?? []) {
    if (!ok(m.oursRedisAfter) || !ok(m.oursKeysAfter) || !ok(m.oursRedis)) continue;
    // What a freed key table leaves behind until Redis resizes it: within 5 % of what the locks took.
    const back = m.oursKeysAfter === 0 && m.oursRedisAfter <= 0.05 * m.oursRedis;
    rows.push([
      `Redis memory after releasing ${m.locks.toLocaleString('en-US')} locks, ${m.nodes} node${m.nodes > 1 ? 's' : ''}: back to the baseline`,
      '0 keys left, ≤ 5 % of the held figure within 2 s',
      `${m.oursKeysAfter} keys left; ${m.oursRedisAfter < 0 ? '−' : '+'}${formatBytes(Math.abs(m.oursRedisAfter))} (held: ${formatBytes(m.oursRedis)})`,
      back ? '✅ met' : '❌ missed',
    ]);
  }
  for (const b of h.baseline ?? []) {
    rows.push([
      `No regression against ${b.commit}, plain loop, ${b.callers} caller${b.callers > 1 ? 's' : ''}, ${b.nodes} node${b.nodes > 1 ? 's' : ''}: now / then, paired rounds`,
      'not slower in every round',
      ok(b.paired) ? `${x(b.paired)} (rounds ${b.low.toFixed(2)}–${b.high.toFixed(2)}×)` : '–',
      !ok(b.paired)
        ? 'not measured'
        : b.high < 1
          ? `❌ slower in every round (median ${pct(1 - b.paired)})`
          : b.low > 1
            ? '✅ faster in every round'
            : '✅ within noise',
    ]);
  }
  if (rows.length === 0) return undefined;
  return markdownTable({
    headers: ['target', 'needed', 'measured', 'verdict'],
    align: ['l', 'r', 'r', 'l'],
    rows,
  });
}
