import { LockOptionsError } from './lock-errors.js';
import type { ResolvedRetry, RetryOptions } from './lock-options.js';

/**
 * The checks every option goes through, engine and Nest layer alike: each
 * refuses a bad value with a LockOptionsError that says what to write instead.
 */

const RETRY_OPTION_KEYS = {
  attempts: true,
  delay: true,
  factor: true,
  maxDelay: true,
  jitter: true,
} satisfies Record<keyof RetryOptions, true>;

const KNOWN_RETRY_KEYS: ReadonlySet<string> = new Set(Object.keys(RETRY_OPTION_KEYS));

export function fail(message: string): never {
  throw new LockOptionsError(message);
}

export function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null;
}

/** using()'s routine, checked before the lock is taken: a lock held for nothing would be released at once. */
export function checkRoutine(routine: unknown): void {
  if (typeof routine !== 'function') {
    fail(
      `using() runs the function given after the resource under the lock (got ${describe(routine)}): ` +
        'pass one, e.g. using(resource, async (lock) => work(lock)).',
    );
  }
}

export function describe(value: unknown): string {
  if (typeof value === 'string') return `'${value}'`;
  if (typeof value === 'number' || typeof value === 'boolean' || value == null)
    return String(value);
  if (Array.isArray(value)) return 'an array';
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`;
}

export function rejectUnknownKeys(
  where: string,
  value: Record<string, unknown>,
  known: ReadonlySet<string>,
  alsoKnown: readonly string[] = [],
): void {
  for (const key of Object.keys(value)) {
    if (!known.has(key) && !alsoKnown.includes(key) && value[key] !== undefined) {
      fail(
        `${where} has no option '${key}'; the options are: ${[...known, ...alsoKnown].join(', ')}.`,
      );
    }
  }
}

/** A whole number of milliseconds within [min, max]. */
export function checkMs(name: string, value: unknown, min: number, max = MAX_TIMER_MS): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    fail(
      `${name} must be a whole number of milliseconds from ${min} to ${max} (got ${describe(value)}).`,
    );
  }
  return value;
}

/** The longest delay a Node.js timer keeps (about 24.8 days); longer ones fire at once. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

export function checkFraction(
  name: string,
  value: unknown,
  min: number,
  max: number,
  hint: string,
): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < min || value > max) {
    fail(`${name} must be a number from ${min} to ${max} (got ${describe(value)}); ${hint}.`);
  }
  return value;
}

export function checkBoolean(name: string, value: unknown): boolean {
  if (typeof value !== 'boolean') fail(`${name} must be true or false (got ${describe(value)}).`);
  return value;
}

export function resolveRetry(where: string, retry: unknown, base: ResolvedRetry): ResolvedRetry {
  if (retry === undefined) return base;
  if (!isObject(retry))
    fail(`${where} must be an object such as { attempts: 5, delay: 10 } (got ${describe(retry)}).`);
  rejectUnknownKeys(where, retry, KNOWN_RETRY_KEYS);
  const attempts = retry.attempts ?? base.attempts;
  if (
    attempts !== Infinity &&
    (typeof attempts !== 'number' || !Number.isInteger(attempts) || attempts < 0)
  ) {
    fail(
      `${where}.attempts must be a whole number from 0, or Infinity (got ${describe(attempts)}).`,
    );
  }
  const resolved = {
    attempts,
    delay: checkMs(`${where}.delay`, retry.delay ?? base.delay, 0),
    factor: checkFraction(
      `${where}.factor`,
      retry.factor ?? base.factor,
      1,
      100,
      'use 1 for a constant delay',
    ),
    maxDelay: checkMs(`${where}.maxDelay`, retry.maxDelay ?? base.maxDelay, 0),
    jitter: checkFraction(
      `${where}.jitter`,
      retry.jitter ?? base.jitter,
      0,
      1,
      'use 0 for no randomness',
    ),
  };
  if (resolved.maxDelay < resolved.delay) {
    fail(
      `${where}.maxDelay (${resolved.maxDelay}) must not be smaller than ${where}.delay (${resolved.delay}).`,
    );
  }
  return Object.freeze(resolved);
}
