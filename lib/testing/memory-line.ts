/**
 * The in-memory engine's waiters: one line per lock key, first come first
 * served, and the pause between a caller's attempts, cut short when the
 * caller is woken (a release in front of it) and ended by its signal.
 */

/** A caller waiting for resources, in the simulated line of each of them. */
export interface Waiter {
  readonly keys: readonly string[];
  /** When the call began; earlier callers go first. */
  readonly arrival: number;
  readonly seq: number;
  /** Asks the waiter to attempt now. */
  wake: () => void;
}

/** The lines of one engine: the waiters of each lock key, earliest first. */
export interface WaitLine {
  readonly waiters: Map<string, Waiter[]>;
  /** Orders callers whose calls began at the same instant. */
  seq: number;
}

/** What the line knows of an acquisition. */
export interface LineRequest {
  readonly keys: readonly string[];
  /** `performance.now()` when the call began: its place in the line. */
  readonly started: number;
  readonly signal: AbortSignal | undefined;
  /** Set once the call waits (lines up or pauses), for the `waited` event. */
  waiting: boolean;
  /** Its place in the line, once it stands there. */
  waiter: Waiter | undefined;
}

export function emptyLine(): WaitLine {
  return { waiters: new Map(), seq: 0 };
}

/** True when an earlier caller waits for any of the request's resources. */
export function someoneAhead(line: WaitLine, request: LineRequest): boolean {
  for (const key of request.keys) {
    const waiters = line.waiters.get(key);
    if (!waiters) continue;
    for (const waiter of waiters) {
      if (waiter === request.waiter) continue;
      if (
        !request.waiter ||
        waiter.arrival < request.waiter.arrival ||
        (waiter.arrival === request.waiter.arrival && waiter.seq < request.waiter.seq)
      )
        return true;
    }
  }
  return false;
}

/** Puts a refused caller in the line of each of its resources, by when its call began. */
export function lineUp(line: WaitLine, request: LineRequest): void {
  request.waiting = true;
  if (request.waiter) return;
  const waiter: Waiter = {
    keys: request.keys,
    arrival: request.started,
    seq: line.seq++,
    wake: () => undefined,
  };
  request.waiter = waiter;
  for (const key of request.keys) {
    const waiters = line.waiters.get(key) ?? [];
    waiters.push(waiter);
    waiters.sort((a, b) => a.arrival - b.arrival || a.seq - b.seq);
    line.waiters.set(key, waiters);
  }
}

export function leaveLine(line: WaitLine, waiter: Waiter, acquired: boolean): void {
  for (const key of waiter.keys) {
    const waiters = line.waiters.get(key);
    if (!waiters) continue;
    const rest = waiters.filter((w) => w !== waiter);
    if (rest.length > 0) line.waiters.set(key, rest);
    else line.waiters.delete(key);
  }
  // Given up: whoever stood behind may go now.
  if (!acquired) wakeFor(line, waiter.keys);
}

/** Wakes the first waiter in the line of each key, which asks again at once. */
export function wakeFor(line: WaitLine, keys: readonly string[]): void {
  for (const key of keys) line.waiters.get(key)?.[0]?.wake();
}

/**
 * Waits `ms` (on `setTimeout`, so fake timers drive it), or less when woken
 * by a release in front of it; rejects with what `aborted` makes of the
 * signal's reason when the caller's signal aborts.
 */
export function pause(
  ms: number,
  request: LineRequest,
  aborted: (reason: unknown) => Error,
): Promise<void> {
  request.waiting = true;
  return new Promise<void>((resolve, reject) => {
    const { signal } = request;
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      if (request.waiter) request.waiter.wake = () => undefined;
    };
    const onAbort = () => {
      done();
      reject(aborted(signal?.reason));
    };
    const timer = setTimeout(
      () => {
        done();
        resolve();
      },
      Math.max(0, ms),
    );
    if (request.waiter)
      request.waiter.wake = () => {
        done();
        resolve();
      };
    if (signal?.aborted) return onAbort();
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
