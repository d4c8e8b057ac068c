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
