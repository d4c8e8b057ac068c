import type { ResolvedRetry } from './lock-options.js';

/**
 * Delay before retry number `retry` (1 for the first retry; Infinity for the
 * longest): exponential growth from `delay` by `factor`, capped at
 * `maxDelay`, spread by ±`jitter`
 * so that waiters that failed together do not come back together.
 */
export function retryDelay(
  policy: ResolvedRetry,
  retry: number,
  random: () => number = Math.random,
): number {
  const base =
    retry === Infinity
      ? policy.maxDelay
      : Math.min(policy.maxDelay, policy.delay * policy.factor ** (retry - 1));
  return Math.max(0, base * (1 + policy.jitter * (2 * random() - 1)));
}

/**
 * Room for the round trips between two attempts of a live waiter in a line
 * lease: a fixed allowance, so that the lease does not grow with the ttl
 * (which scales the per-node timeout). A node slower than this may drop a
 * live waiter's place there for a moment; it gets it back at its next attempt.
 */
const LINE_ROUND_TRIPS_MS = 250;

/**
 * How long a refused waiter keeps its place in the nodes' lines (see ACQUIRE):
 * a live waiter asks again at least every `maxDelay` (plus jitter) even when
 * no release reaches it, so two of those gaps and the round trips never drop
 * a live waiter; one that crashed or gave up without leaving holds the line
 * at most this long: 850 ms with the default retry policy, whatever the ttl.
 */
export function lineLease(policy: ResolvedRetry): number {
  return Math.ceil(2 * policy.maxDelay * (1 + policy.jitter)) + LINE_ROUND_TRIPS_MS;
}
