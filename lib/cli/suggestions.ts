/**
 * "Did you mean" for a misspelt command or option: the nearest known name,
 * when it is one or two edits away.
 */

/** ` (did you mean --limit?)` when a known name is near `name`, else ''. `dashes` go before it. */
export function suggest(name: string, known: readonly string[], dashes: string): string {
  const near = known
    .map((candidate) => ({ candidate, distance: editDistance(name, candidate) }))
    .filter((c) => c.distance <= 2)
    .sort((a, b) => a.distance - b.distance)[0];
  return near ? ` (did you mean ${dashes}${near.candidate}?)` : '';
}

/** Levenshtein distance: the insertions, deletions and substitutions that turn `a` into `b`. */
export function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      current[j] = Math.min(
        previous[j] + 1,
        current[j - 1] + 1,
        previous[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1),
      );
    }
    previous = current;
  }
  return previous[b.length];
}
