import { LockOptionsError } from './lock-errors.js';

/** Longest resource name accepted; longer ones are almost always a key built from the wrong value. */
export const MAX_RESOURCE_LENGTH = 512;

/** A UTF-16 surrogate code unit without its pair: text with one has no UTF-8 form. */
const LONE_SURROGATE = /\p{Cs}/u;

/** True when `text` holds a lone surrogate (it would collapse into U+FFFD on the wire). */
export function hasLoneSurrogate(text: string): boolean {
  return LONE_SURROGATE.test(text);
}

/**
 * Why `resource` cannot be a resource name, or undefined when it can: a
 * string of 1 to MAX_RESOURCE_LENGTH characters, well-formed Unicode (a lone
 * surrogate would collapse into U+FFFD and share a key with others), not
 * starting with `}` (its hash tag would be empty on a Redis Cluster).
 */
export function resourceProblem(resource: unknown): string | undefined {
  if (typeof resource !== 'string') return `it is ${resource === null ? 'null' : typeof resource}`;
  if (resource.length === 0 || resource.length > MAX_RESOURCE_LENGTH) {
    return `it has ${resource.length} characters, not 1 to ${MAX_RESOURCE_LENGTH}`;
  }
  if (resource.charCodeAt(0) === 0x7d) {
    return "it starts with '}', which would end the key's Redis Cluster hash tag early; put another character first";
  }
  if (hasLoneSurrogate(resource)) return 'it is not well-formed Unicode (a lone surrogate)';
  return undefined;
}

/** One resource or several, each a valid resource name; duplicates dropped. */
export function normalizeResources(resources: string | readonly string[]): readonly string[] {
  const list = typeof resources === 'string' ? [resources] : resources;
  if (!Array.isArray(list) || list.length === 0) {
    throw new LockOptionsError(
      `Name the resource(s) to lock as a string or a non-empty array of strings, e.g. 'order:42' (got ${Array.isArray(list) ? 'an empty array' : typeof resources}).`,
    );
  }
  for (const resource of list) {
    const problem = resourceProblem(resource);
    if (problem) throw new LockOptionsError(`That resource name cannot be used: ${problem}.`);
  }
  return list.length === 1 ? list : [...new Set(list)];
}
