import type { ResolvedRetry } from './lock-options.js';

/**
 * Delay before retry number `retry` (1 for the first retry): exponential
 * growth from `delay` by `factor`, capped at `maxDelay`, spread by ±`jitter`
 * so that waiters that failed together do not come back together.
 */
export function retryDelay(
  policy: ResolvedRetry,
  retry: number,
  random: () => number = Math.random,
): number {
  const base = Math.min(policy.maxDelay, policy.delay * policy.factor ** (retry - 1));
  return Math.max(0, base * (1 + policy.jitter * (2 * random() - 1)));
}

/**
 * How long a refused waiter keeps its place in the nodes' lines (see ACQUIRE):
 * a live waiter asks again at least every `maxDelay` (plus jitter) even when
 * no release reaches it, so two of those gaps and two node round trips never
 * drop a live waiter; one that crashed or gave up without leaving holds the
 * line at most this long.
 */
export function lineLease(policy: ResolvedRetry, nodeTimeout: number): number {
  return Math.ceil(2 * policy.maxDelay * (1 + policy.jitter) + 2 * nodeTimeout + 50);
}
