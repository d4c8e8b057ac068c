import { once } from 'node:events';

/**
 * Resolves once a lock's signal has aborted: at once when it already has.
 * A lease that ran out before its signal was first read aborts the signal as
 * it is read, before `once(signal, 'abort')` could listen: that wait would
 * never end (a stall on a loaded machine between the grant and the read is
 * enough with a lease of tens of ms).
 */
export function whenLost(lock: { readonly signal: AbortSignal }): Promise<void> {
  const { signal } = lock;
  return signal.aborted ? Promise.resolve() : once(signal, 'abort').then(() => undefined);
}
