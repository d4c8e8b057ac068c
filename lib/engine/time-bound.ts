/** How a promise raced against a timer gives up. */
export interface BoundOptions {
  /**
   * Let the process exit while only the timer is left (a background chore);
   * default false, so a caller that awaits the result is never cut short.
   */
  readonly unref?: boolean;
}

/**
 * Calls `timedOut` once `ms` have passed, one turn of the event loop after the
 * timer fires: a loop that was blocked past `ms` runs its timers before it
 * reads the sockets, and an answer already received must win over the
 * timeout. Cleared like any timer.
 */
export function answerTimeout(timedOut: () => void, ms: number): NodeJS.Timeout {
  return setTimeout(() => setImmediate(timedOut), ms);
}

/**
 * `work`, or a rejection with `no answer within <ms> ms` once `ms` have
 * passed without it settling. The timer is cleared as soon as either side
 * wins. A node that never answers (a paused process, a black hole) costs at
 * most `ms`; what it would have answered later is dropped.
 */
export function bounded<T>(work: Promise<T>, ms: number, options: BoundOptions = {}): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = answerTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
    if (options.unref) timer.unref();
  });
  return Promise.race([work, late]).finally(() => clearTimeout(timer));
}
