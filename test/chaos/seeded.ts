/**
 * Seeded randomness for the chaos runs: the harness's choice of faults and
 * every client's choices (resources, hold times, pauses between sections)
 * follow the run's seed, so a failing run replays with CHAOS_SEED. What the
 * seed cannot fix is timing: the processes still race as the machine lets
 * them, and the engine's own retry jitter is its own.
 */

/** A small seeded generator (mulberry32): numbers in [0, 1). */
export function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * A seed of its own for each part (a client, a worker), so that one part's
 * choices do not depend on how many numbers another part drew before it.
 */
export function derivedSeed(seed: number, ...parts: (string | number)[]): number {
  // FNV-1a over the seed and the parts' names.
  let hash = 0x811c9dc5;
  for (const char of [seed, ...parts].join('/')) {
    hash = Math.imul(hash ^ char.charCodeAt(0), 0x01000193) >>> 0;
  }
  return hash;
}
