import type { LockMode } from '../read-write-lock.js';

/**
 * What the nodes' entries for a read-write lock or a semaphore add up to.
 * Each holding (a read or write hold, a permit in its slot) is a lease of its
 * own on every node, valid while a quorum of nodes holds it: the same rule as
 * a lock's, per holding. These functions judge what the nodes answered; the
 * reading is in lease-inspection.ts.
 */

/** One live entry of a node's holders hash (entries past their expiry are left out). */
export interface NodeLeaseHolder {
  /** The holding's value (`lock.value` of the hold or permit). */
  readonly value: string;
  /** A read-write hold's mode; undefined for a permit. */
  readonly mode?: LockMode;
  /** A permit's slot, 1 to N; undefined for a read-write hold. */
  readonly slot?: number;
  /** What is left of the entry's lease in ms, by the node's clock. */
  readonly lease: number;
  /** The fencing token the entry records (0 when the engine does not fence). */
  readonly token: number;
}

/** One live place in a node's line of waiters. */
export interface NodeLineWaiter {
  /** The waiter's id (the value of its first attempt). */
  readonly waiter: string;
  /** When it lined up, in epoch ms of the nodes' clock: the line goes by arrival. */
  readonly arrival: number;
  /** The mode a read-write waiter asks for; undefined in a semaphore's line. */
  readonly mode?: LockMode;
  /** How long it has waited in ms, by the node's clock. */
  readonly waited: number;
  /** What is left of its place in ms: each attempt renews it, so it lapses once the waiter is gone. */
  readonly place: number;
}

/** One node's answer about a read-write lock or a semaphore. */
export interface NodeLeaseState {
  /** The node's label (`host:port`, or its Sentinel or cluster seeds). */
  readonly node: string;
  /** The live holders, or undefined when the node did not answer. */
  readonly holders: readonly NodeLeaseHolder[] | undefined;
  /** The live places in line, by arrival, or undefined when the node did not answer. */
  readonly line: readonly NodeLineWaiter[] | undefined;
  /** The last token this node issued for the name (as NodeLockState's fence), null: none. */
  readonly fence: number | null | undefined;
  /** Why the node did not answer. */
  readonly error?: string;
}

/** A holding as the nodes add it up. */
export interface LeaseHolding {
  /** The holding's value (`lock.value` of the hold or permit). */
  readonly value: string;
  /** A read-write hold's mode; undefined for a permit. */
  readonly mode?: LockMode;
  /** A permit's slot, 1 to N; undefined for a read-write hold. */
  readonly slot?: number;
  /** How many nodes have a live entry for it. */
  readonly nodes: number;
  /**
   * How long it stays held in ms: for a holding on a quorum, the time a
   * quorum of its entries lasts (the quorum-th longest lease); for one short
   * of a quorum, its longest entry's.
   */
  readonly lease: number;
  /**
   * Its holder's token: the one a quorum of its entries record (a grant's
   * token is written back until a quorum carries it; a node outside that
   * quorum may record another). Short of such a quorum, the highest.
   */
  readonly token: number;
}

/** A waiter as the nodes' lines add it up. */
export interface LineWaiter {
  /** The waiter's id (the value of its first attempt). */
  readonly waiter: string;
  /** When it lined up, in epoch ms of the nodes' clock: the line goes by arrival. */
  readonly arrival: number;
  /** The mode a read-write waiter asks for; undefined in a semaphore's line. */
  readonly mode?: LockMode;
  /** How many nodes keep its place. */
  readonly nodes: number;
  /** How long it has waited in ms, by the clock of the nodes. */
  readonly waited: number;
  /** The longest of its places, in ms. */
  readonly place: number;
}

/** What a read-write lock's or a semaphore's inspection says, whichever it is. */
export interface LeaseInspection {
  /** The name of the read-write lock or semaphore. */
  readonly resource: string;
  /**
   * held: some holding stands on a quorum of nodes; free: none does, and none
   * could even counting the nodes that did not answer; unknown: too few
   * answered to tell.
   */
  readonly verdict: 'held' | 'free' | 'unknown';
  /** True when some node that answered has a live holder or a waiter in line. */
  readonly present: boolean;
  /** The holdings that stand on a quorum. */
  readonly holders: readonly LeaseHolding[];
  /** Holdings short of a quorum that the nodes that did not answer could complete. */
  readonly uncertain: readonly LeaseHolding[];
  /**
   * Holdings short of a quorum that no answer could complete: a lost vote or
   * a release still on its way, gone with their lease.
   */
  readonly stale: readonly LeaseHolding[];
  /** The waiters in line on any node, first come first. */
  readonly line: readonly LineWaiter[];
  /** Nodes that answered. */
  readonly answered: number;
  /** The highest fence counter on any node: the last token issued for the name. */
  readonly fence: number | undefined;
  /** Each node's answer, in the engine's node order. */
  readonly nodes: readonly NodeLeaseState[];
}

/** A read-write lock's inspection. */
export interface ReadWriteInspection extends LeaseInspection {
  /** Which primitive this is. */
  readonly kind: 'read-write';
  /** When held: 'write' (one writer) or 'read' (`holders.length` readers). */
  readonly mode: LockMode | undefined;
}

/** A semaphore's inspection. */
export interface SemaphoreInspection extends LeaseInspection {
  /** Which primitive this is. */
  readonly kind: 'semaphore';
  /**
   * N, when the caller knows it: the nodes do not keep it (each caller
   * names its own), so an inspection from the nodes alone leaves it undefined.
   */
  readonly permits: number | undefined;
}

/** The verdict on a read-write lock from its nodes' answers (one per node), for a quorum of `quorum`. */
export function judgeReadWrite(
  resource: string,
  nodes: readonly NodeLeaseState[],
  quorum: number,
): ReadWriteInspection {
  const judged = judgeLeases(resource, nodes, quorum, (holder) => holder.value);
  // Writers first: a writer on a quorum means that readers listed beside it are leftovers.
  const holders = [...judged.holders].sort(byMode);
  return {
    kind: 'read-write',
    ...judged,
    holders,
    uncertain: [...judged.uncertain].sort(byMode),
    stale: [...judged.stale].sort(byMode),
    mode: holders.length === 0 ? undefined : holders[0].mode,
  };
}

/**
 * The verdict on a semaphore from its nodes' answers (one per node), for a
 * quorum of `quorum`; `permits` is its N when known. A permit is a value in a
 * slot: the same value in two slots (a split vote) is two holdings.
 */
export function judgeSemaphore(
  resource: string,
  nodes: readonly NodeLeaseState[],
  quorum: number,
  permits?: number,
): SemaphoreInspection {
  const judged = judgeLeases(resource, nodes, quorum, (h) => `${h.slot ?? 0} ${h.value}`);
  const bySlot = (a: LeaseHolding, b: LeaseHolding) =>
    (a.slot ?? 0) - (b.slot ?? 0) || compareText(a.value, b.value);
  return {
    kind: 'semaphore',
    ...judged,
    holders: [...judged.holders].sort(bySlot),
    uncertain: [...judged.uncertain].sort(bySlot),
    stale: [...judged.stale].sort(bySlot),
    permits,
  };
}

function judgeLeases(
  resource: string,
  nodes: readonly NodeLeaseState[],
  quorum: number,
  identify: (holder: NodeLeaseHolder) => string,
): LeaseInspection {
  const entries = new Map<string, NodeLeaseHolder[]>();
  const places = new Map<string, NodeLineWaiter[]>();
  let answered = 0;
  let present = false;
  for (const node of nodes) {
    if (node.holders === undefined) continue;
    answered++;
    for (const holder of node.holders) {
      const id = identify(holder);
      entries.set(id, [...(entries.get(id) ?? []), holder]);
    }
    for (const waiter of node.line ?? []) {
      places.set(waiter.waiter, [...(places.get(waiter.waiter) ?? []), waiter]);
    }
    if (node.holders.length > 0 || (node.line?.length ?? 0) > 0) present = true;
  }
  const silent = nodes.length - answered;
  const holdings = [...entries.values()].map((list) => holdingOf(list, quorum));
  const holders = holdings.filter((h) => h.nodes >= quorum);
  const uncertain = holdings.filter((h) => h.nodes < quorum && h.nodes + silent >= quorum);
  const stale = holdings.filter((h) => h.nodes + silent < quorum);
  const verdict: LeaseInspection['verdict'] =
    holders.length > 0 ? 'held' : uncertain.length > 0 || silent >= quorum ? 'unknown' : 'free';
  const line = [...places.values()]
    .map((list): LineWaiter => {
      const { waiter, arrival, mode } = list[0];
      return {
        waiter,
        arrival,
        ...(mode === undefined ? {} : { mode }),
        nodes: list.length,
        waited: Math.max(...list.map((p) => p.waited)),
        place: Math.max(...list.map((p) => p.place)),
      };
    })
    .sort((a, b) => a.arrival - b.arrival || compareText(a.waiter, b.waiter));
  const fences = nodes.map((n) => n.fence).filter((f): f is number => typeof f === 'number');
  return {
    resource,
    verdict,
    present,
    holders,
    uncertain,
    stale,
    line,
    answered,
    fence: fences.length > 0 ? Math.max(...fences) : undefined,
    nodes,
  };
}

/** The entries of one holding on the nodes that have it. */
function holdingOf(list: readonly NodeLeaseHolder[], quorum: number): LeaseHolding {
  const leases = list.map((h) => h.lease).sort((a, b) => b - a);
  const { value, slot } = list[0];
  // The nodes agree on a holding's mode; were they ever to differ, the stricter one is shown.
  const mode = list.some((h) => h.mode === 'write') ? 'write' : list[0].mode;
  return {
    value,
    ...(mode === undefined ? {} : { mode }),
    ...(slot === undefined ? {} : { slot }),
    nodes: list.length,
    lease: list.length >= quorum ? leases[quorum - 1] : leases[0],
    token: quorumToken(list, quorum) ?? Math.max(...list.map((h) => h.token)),
  };
}

/** The token at least `quorum` of the entries record (at most one can), or undefined. */
function quorumToken(list: readonly NodeLeaseHolder[], quorum: number): number | undefined {
  const counts = new Map<number, number>();
  for (const { token } of list) counts.set(token, (counts.get(token) ?? 0) + 1);
  for (const [token, count] of counts) if (count >= quorum) return token;
  return undefined;
}

/** Writers first, then by value. */
export function byMode(
  a: { mode?: LockMode; value: string },
  b: { mode?: LockMode; value: string },
) {
  return Number(b.mode === 'write') - Number(a.mode === 'write') || compareText(a.value, b.value);
}

/** The order Lua's string comparison gives ids (byte order), which the nodes' lines use for ties. */
export function compareText(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
