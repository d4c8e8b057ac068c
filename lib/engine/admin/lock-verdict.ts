import type { LockInspection } from '../lock-admin.js';

/**
 * What an inspection says about a lock, as an operator reads it. held: a
 * quorum holds one value; free: no value can have a quorum, even if every
 * node that did not answer held it; unknown: too few answers to tell.
 */
export type LockVerdict = 'held' | 'free' | 'unknown';

/** An inspection with its verdict and the counts behind it. */
export interface JudgedLock {
  readonly inspection: LockInspection;
  readonly verdict: LockVerdict;
  /** Nodes that answered. */
  readonly answered: number;
  /** Nodes holding the held value (0 unless held). */
  readonly holding: number;
  /** Nodes that answered with a lock key of any value. */
  readonly keyed: number;
}

/** The verdict on `inspection` (one entry per node) for a quorum of `quorum` nodes. */
export function judgeLock(inspection: LockInspection, quorum: number): JudgedLock {
  const votes = new Map<string, number>();
  let answered = 0;
  for (const node of inspection.nodes) {
    if (node.holder === undefined) continue;
    answered++;
    if (node.holder !== null) votes.set(node.holder, (votes.get(node.holder) ?? 0) + 1);
  }
  const top = Math.max(0, ...votes.values());
  const silent = inspection.nodes.length - answered;
  const verdict: LockVerdict = inspection.held
    ? 'held'
    : top + silent >= quorum
      ? 'unknown'
      : 'free';
  return {
    inspection,
    verdict,
    answered,
    holding: inspection.held ? (votes.get(inspection.holder!) ?? 0) : 0,
    keyed: [...votes.values()].reduce((sum, n) => sum + n, 0),
  };
}
