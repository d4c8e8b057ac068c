import type { LockLogger } from '../../lib/engine/index.js';

/** A logger that keeps what it is told, so tests can assert on warnings without noise. */
export function quietLogger(): LockLogger & { warnings: string[]; errors: string[] } {
  const warnings: string[] = [];
  const errors: string[] = [];
  return {
    warnings,
    errors,
    warn: (message: string) => void warnings.push(message),
    error: (message: string) => void errors.push(message),
  };
}
