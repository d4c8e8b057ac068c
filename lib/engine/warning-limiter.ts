/** How long warnings about one subject are folded after one was written. */
const FOLD_MS = 10_000;

/**
 * Writes at most one warning per subject (a node, say) every 10 s. The ones
 * folded meanwhile are counted, and the next warning written says how many,
 * so an outage of one node gives a line every 10 s instead of one per lock.
 */
export class WarningLimiter {
  private readonly subjects = new Map<string, { until: number; folded: number }>();

  constructor(private readonly write: (message: string) => void) {}

  warn(subject: string, message: string): void {
    const now = performance.now();
    const seen = this.subjects.get(subject);
    if (seen && now < seen.until) {
      seen.folded++;
      return;
    }
    const folded = seen?.folded ?? 0;
    this.subjects.set(subject, { until: now + FOLD_MS, folded: 0 });
    this.write(
      folded === 0
        ? message
        : `${message} (${folded} more like it about ${subject} in the last ${Math.round((now - seen!.until + FOLD_MS) / 1000)} s were not logged)`,
    );
  }
}
