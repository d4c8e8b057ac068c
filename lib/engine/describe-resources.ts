/** How messages name resources: the first three, then how many more. */
export function describeResources(resources: readonly string[]): string {
  const shown = resources
    .slice(0, 3)
    .map((r) => `'${r}'`)
    .join(', ');
  return resources.length > 3 ? `${shown} and ${resources.length - 3} more` : shown;
}
