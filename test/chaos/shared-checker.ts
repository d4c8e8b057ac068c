/**
 * Judges a history of read-write and semaphore holdings (pure, no I/O).
 * Every holding counts from the moment its holder learnt of the grant to the
 * earlier of its release call and the end of its validity (moved by
 * extensions), all on one monotonic clock.
 *
 * - `writer-overlap`: a write holding overlaps any other holding of its
 *   resource (read or write);
 * - `too-many-permits`: more valid permits of a semaphore at some moment
 *   than its N; `slot-shared`: two valid permits in the same slot;
 * - `write-token-order`: a writer's token not above the token of every
 *   holding of its resource granted before it was asked for;
 * - `read-token`: a reader's token below the token of a write that ended
 *   before it was asked for, or not below the token of a write granted after
 *   it ended;
 * - `permit-token-order`: a permit's token not above that of every permit of
 *   its slot granted before it was asked for.
 */
export interface Holding {
  readonly holder: string;
  readonly resource: string;
  readonly kind: 'read' | 'write' | 'permit';
  /** When the acquisition was invoked, and when its grant was learnt. */
  readonly asked: number;
  readonly granted: number;
  /** End of the holding: release call or end of validity, whichever came first. */
  readonly end: number;
  readonly token: number;
  readonly slot?: number;
  /** A semaphore's N at the grant. */
  readonly permits?: number;
}

export interface SharedViolation {
  readonly kind:
    | 'writer-overlap'
    | 'too-many-permits'
    | 'slot-shared'
    | 'write-token-order'
    | 'read-token'
    | 'permit-token-order';
  readonly resource: string;
  readonly message: string;
}

const overlaps = (a: Holding, b: Holding) => a.granted < b.end && b.granted < a.end;
const name = (h: Holding) =>
  `${h.holder} ${h.kind}${h.slot ? ` slot ${h.slot}` : ''} (token ${h.token})`;

export function checkShared(holdings: readonly Holding[]): SharedViolation[] {
  const violations: SharedViolation[] = [];
  const byResource = new Map<string, Holding[]>();
  for (const h of holdings) {
    const list = byResource.get(h.resource) ?? [];
    list.push(h);
    byResource.set(h.resource, list);
  }
  for (const [resource, list] of byResource) {
    const rw = list.filter((h) => h.kind !== 'permit');
    for (const w of rw.filter((h) => h.kind === 'write')) {
      for (const other of rw) {
        if (other === w) continue;
        if (overlaps(w, other) && (other.kind === 'read' || other.granted > w.granted)) {
          violations.push({
            kind: 'writer-overlap',
            resource,
            message: `${resource}: ${name(w)} held ${(Math.min(w.end, other.end) - Math.max(w.granted, other.granted)).toFixed(1)} ms together with ${name(other)}`,
          });
        }
        if (other.granted < w.asked && other.token >= w.token) {
          violations.push({
            kind: 'write-token-order',
            resource,
            message: `${resource}: ${name(w)} is not above ${name(other)}, granted before it asked`,
          });
        }
      }
    }
    for (const r of rw.filter((h) => h.kind === 'read')) {
      for (const w of rw.filter((h) => h.kind === 'write')) {
        const before = w.end <= r.asked && w.token > r.token;
        const after = w.asked >= r.end && w.token <= r.token;
        if (before || after) {
          violations.push({
            kind: 'read-token',
            resource,
            message: `${resource}: ${name(r)} ${before ? 'below' : 'not below'} ${name(w)}, which ${before ? 'ended before it was asked for' : 'was asked for after it ended'}`,
          });
        }
      }
    }
    const permits = list.filter((h) => h.kind === 'permit');
    // Sweep the grants in time order: how many permits are valid at each grant.
    for (const p of permits) {
      // A permit that ended before its grant was learnt (validity run out while its holder
      // was held up) is valid at no moment: nothing to count at its grant.
      const valid = permits.filter((q) => q.granted <= p.granted && q.end > p.granted);
      const limit = Math.max(...valid.map((q) => q.permits ?? Infinity));
      if (valid.length > 0 && valid.length > limit) {
        violations.push({
          kind: 'too-many-permits',
          resource,
          message: `${resource}: ${valid.length} valid permits of ${limit} when ${name(p)} was granted: ${valid.map(name).join(', ')}`,
        });
      }
      for (const q of permits) {
        if (q === p || q.slot !== p.slot) continue;
        if (q.granted < p.granted && overlaps(p, q)) {
          violations.push({
            kind: 'slot-shared',
            resource,
            message: `${resource}: ${name(p)} and ${name(q)}`,
          });
        }
        if (q.granted < p.asked && q.token >= p.token) {
          violations.push({
            kind: 'permit-token-order',
            resource,
            message: `${resource}: ${name(p)} is not above ${name(q)}, granted before it asked`,
          });
        }
      }
    }
  }
  return violations;
}
