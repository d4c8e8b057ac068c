/**
 * Errors raised while taking a lock through the Nest layer (LockService or
 * `@Locked()`), as opposed to errors the application's own code threw. Only
 * these become 409 / 503 / 400 answers in the lock-context interceptor.
 */
const lockFailures = new WeakSet<object>();

/** @internal */
export function markLockFailure<T>(error: T): T {
  if (typeof error === 'object' && error !== null) lockFailures.add(error);
  return error;
}

/** True for an error raised while taking a lock, not one the application threw. */
export function isLockFailure(error: unknown): boolean {
  return typeof error === 'object' && error !== null && lockFailures.has(error);
}

/** Failures the service's logger has reported already, so the interceptor does not log them twice. */
const loggedFailures = new WeakSet<object>();

/** @internal */
export function markLogged(error: object): void {
  loggedFailures.add(error);
}

/** @internal */
export function wasLogged(error: unknown): boolean {
  return typeof error === 'object' && error !== null && loggedFailures.has(error);
}
