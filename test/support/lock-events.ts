import type {
  Lock,
  LockEngine,
  LockEvents,
  ReleaseResult,
  RetryOptions,
} from '../../lib/engine/index.js';

/** The events about locks (every one but nodeRestarted, which is about a node). */
type EventName = Exclude<keyof LockEvents, 'nodeRestarted'>;
type EventOf<N extends EventName> = LockEvents[N][0];

function resourcesOf(event: EventOf<EventName>): readonly string[] {
  return 'lock' in event ? event.lock.resources : event.resources;
}

/**
 * Resolves with the `count`-th `name` event (default: the next one) whose
 * resources include `resource`. Listening starts when this is called, so call
 * it before the action that causes the event.
 */
export function nextLockEvent<N extends EventName>(
  engine: LockEngine,
  name: N,
  resource: string,
  count = 1,
): Promise<EventOf<N>> {
  return new Promise((resolve) => {
    let seen = 0;
    const listener = (event: EventOf<N>) => {
      if (!resourcesOf(event).includes(resource) || ++seen < count) return;
      engine.off(name, listener as never);
      resolve(event);
    };
    engine.on(name, listener as never);
  });
}

/** Counts the `name` events about `resource` from now on; `stop()` detaches. */
export function countLockEvents(
  engine: LockEngine,
  name: EventName,
  resource: string,
): { readonly count: number; stop(): void } {
  let count = 0;
  const listener = (event: EventOf<EventName>) => {
    if (resourcesOf(event).includes(resource)) count++;
  };
  engine.on(name, listener as never);
  return {
    get count() {
      return count;
    },
    stop: () => void engine.off(name, listener as never),
  };
}

/**
 * A timed hand-off: `waiter` asks for `resource` (held by `lock`) with
 * `retry`; once it has been refused `refusals` times, `lock` is released.
 * Resolves with the waiter's lock, the release's result and the ms from the
 * release to the grant: with a long retry delay, only a wake-up explains a
 * short one.
 */
export async function timedHandOff(
  lock: Lock,
  waiter: LockEngine,
  resource: string,
  retry: RetryOptions,
  refusals = 1,
): Promise<{ next: Lock; released: ReleaseResult; ms: number }> {
  const contended = nextLockEvent(waiter, 'contended', resource, refusals);
  const waiting = waiter.acquire(resource, { retry });
  await contended;
  const start = performance.now();
  const released = await lock.release();
  const next = await waiting;
  return { next, released, ms: performance.now() - start };
}
