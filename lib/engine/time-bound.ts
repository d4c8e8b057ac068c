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

/** A deadline watched by {@link watchDeadline}. */
interface Deadline {
  readonly at: number;
  readonly expire: () => void;
}

/** Every deadline being watched, and the one timer that watches them (unset when none is due). */
const deadlines = new Set<Deadline>();
let watcher: NodeJS.Timeout | undefined;
let watcherAt = Infinity;

/**
 * Calls `expire` once `ms` have passed, like {@link answerTimeout} (one turn
 * of the event loop after the time is up, so that an answer already received
 * wins), unless the returned cancel function is called first.
 *
 * For what starts and ends many times a second, each within a round trip:
 * a quorum round. All share one timer, set for the earliest deadline and
 * left running when that deadline is cancelled; when it fires it expires
 * what is due and is set again for the next. A timer of its own for each
 * would create and clear one per round, and Node.js then builds and drops a
 * timer list each time (a lone caller, one node, in paired rounds: a fifth of
 * the engine's CPU per lock cycle). Unreferenced: what is awaited (a
 * connection) keeps the process alive, the watch alone does not.
 */
export function watchDeadline(ms: number, expire: () => void): () => void {
  const deadline: Deadline = { at: performance.now() + ms, expire };
  deadlines.add(deadline);
  if (deadline.at < watcherAt) watchUntil(deadline.at);
  return () => void deadlines.delete(deadline);
}

function watchUntil(at: number): void {
  clearTimeout(watcher);
  watcherAt = at;
  watcher = setTimeout(
    () => {
      watcher = undefined;
      watcherAt = Infinity;
      // One turn later, as answerTimeout() waits: replies already received count first.
      setImmediate(expireDue);
    },
    Math.max(0, at - performance.now()),
  );
  watcher.unref();
}

function expireDue(): void {
  const now = performance.now();
  let next = Infinity;
  for (const deadline of deadlines) {
    if (deadline.at <= now) {
      deadlines.delete(deadline);
      deadline.expire();
    } else if (deadline.at < next) next = deadline.at;
  }
  if (next < watcherAt) watchUntil(next);
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
