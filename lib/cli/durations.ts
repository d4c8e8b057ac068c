/** Durations as the tool shows them: leases, lifetimes and latencies, all in ms. */

/** `850 ms`, `4.9 s`, `12 min 5 s`, `2 h 5 min`. */
export function formatDuration(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(Math.floor(ms / 100) / 10).toFixed(1)} s`;
  const seconds = Math.floor(ms / 1000);
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ${seconds % 60} s`;
  return `${Math.floor(seconds / 3600)} h ${Math.floor((seconds % 3600) / 60)} min`;
}

/** A remaining lease: `-` without a key (null or unknown), `no expiry` for PTTL -1. */
export function formatLease(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) return '-';
  return ms === -1 ? 'no expiry' : formatDuration(ms);
}

/** A latency in ms with the precision a ping deserves. */
export function formatLatency(ms: number): string {
  return ms < 10 ? `${ms.toFixed(2)} ms` : `${Math.round(ms)} ms`;
}

/** A latency for --json: ms to the hundredth. */
export function roundLatency(ms: number): number {
  return Math.round(ms * 100) / 100;
}
