/**
 * This process's waiters for a busy lock, first come first served per set
 * of keys. Only the head of a queue asks the nodes again; it does so as soon
 * as a release of one of its keys is heard (from this process or, through
 * the release channel, from any other), with its retry delay as a fallback.
 * The others wait their turn instead of polling, which keeps the hand-off
 * fast and fair and spares the nodes a herd of retries.
 */
export class WaitQueues {
  private readonly queues = new Map<string, WaitQueue>();
  private readonly byKey = new Map<string, Set<WaitQueue>>();
  /** The attempts of this process made outside any queue, by key (see watch()). */
  private readonly watchers = new Map<string, Set<Watcher>>();

  /**
   * Watches the keys of an attempt made outside any queue, whose caller has
   * no place in one yet and hears every release of its keys (the release
   * channel listens to them all): `end()` tells whether a release may have
   * gone unheard by it, so that once in a queue it must ask again at once
   * rather than wait for the next release. True when a release of a key came
   * while watched that named this caller (`waiter()`, its name in the nodes'
   * lines), or named nobody and woke fewer of this process's queues than it
   * could have (none, for a semaphore's permit). A caller that does not hear
   * every release needs no watch: it always asks again at once.
   */
  watch(keys: readonly string[], waiter: () => string): ReleaseWatch {
    const watcher: Watcher = { missed: false, waiter };
    for (const key of keys) {
      let set = this.watchers.get(key);
      if (!set) this.watchers.set(key, (set = new Set()));
      set.add(watcher);
    }
    let ended = false;
    return {
      end: () => {
        if (!ended) {
          ended = true;
          for (const key of keys) {
            const set = this.watchers.get(key)!;
            set.delete(watcher);
            if (set.size === 0) this.watchers.delete(key);
          }
        }
        return watcher.missed;
      },
    };
  }

  /** True when some caller of this process is waiting for exactly these keys. */
  has(id: string): boolean {
    return this.queues.size > 0 && this.queues.has(id);
  }

  /**
   * Joins the queue of these keys (`id` names the key set), ranked by
   * `arrival`: when the acquisition began, in epoch ms, as the nodes rank it.
   */
  join(id: string, keys: readonly string[], arrival: number): Ticket {
    let queue = this.queues.get(id);
    if (!queue) {
      queue = new WaitQueue(id, keys, this);
      this.queues.set(id, queue);
      for (const key of keys) {
        let set = this.byKey.get(key);
        if (!set) this.byKey.set(key, (set = new Set()));
        set.add(queue);
      }
    }
    return queue.enter(arrival);
  }

  /**
   * A release of `key` was heard: the heads of the queues that wait on it try
   * again, unless the nodes named other waiters first in line (`head`: one
   * name, or several separated by commas). At most `limit` queues wake, the
   * earliest waiters first (a semaphore's release frees one permit: waking
   * every waiter would only have all but one refused).
   */
  released(key: string, head = '', limit = Infinity): void {
    const woken = this.wake(key, head, limit);
    const watching = this.watchers.get(key);
    if (!watching) return;
    for (const watcher of watching) {
      if (head === '' ? woken < limit : named(head, watcher.waiter())) watcher.missed = true;
    }
  }

  /** Wakes the queues waiting on `key` (see released()); returns how many it woke. */
  private wake(key: string, head: string, limit: number): number {
    const set = this.byKey.get(key);
    if (!set) return 0;
    let woken = 0;
    if (limit >= set.size) {
      for (const queue of set) if (queue.wake(head)) woken++;
      return woken;
    }
    for (const queue of [...set].sort((a, b) => a.arrival - b.arrival)) {
      if (woken >= limit) break;
      if (queue.wake(head)) woken++;
    }
    return woken;
  }

  /** @internal */
  drop(queue: WaitQueue): void {
    this.queues.delete(queue.id);
    for (const key of queue.keys) {
      const set = this.byKey.get(key);
      set?.delete(queue);
      if (set?.size === 0) this.byKey.delete(key);
    }
  }
}

interface Watcher {
  missed: boolean;
  readonly waiter: () => string;
}

/** See {@link WaitQueues.watch}. */
export interface ReleaseWatch {
  /** Stops watching (once; later calls repeat the answer): may a release have gone unheard? */
  end(): boolean;
}

class WaitQueue {
  readonly tickets: Ticket[] = [];
  /** Releases heard so far. */
  wakes = 0;

  constructor(
    readonly id: string,
    readonly keys: readonly string[],
    private readonly owner: WaitQueues,
  ) {}

  enter(arrival: number): Ticket {
    const ticket = new Ticket(this, arrival);
    const { tickets } = this;
    // In the order the acquisitions began, as the nodes' lines rank them: one whose first
    // attempts failed may line up after others that began later, and must not stand behind them.
    let index = tickets.length;
    while (index > 0 && tickets[index - 1].arrival > arrival) index--;
    tickets.splice(index, 0, ticket);
    return ticket;
  }

  /** When its first waiter's acquisition began (epoch ms); Infinity when nobody waits. */
  get arrival(): number {
    return this.tickets[0]?.arrival ?? Infinity;
  }

  /** Wakes the first waiter unless the nodes named others first in line; true when it did. */
  wake(head: string): boolean {
    const first = this.tickets[0];
    // Another process's waiter is first in the nodes' line: asking now would only be refused.
    // A waiter not yet in that line (no attempt made yet) asks, which puts it there.
    if (head !== '' && first?.waiter && !named(head, first.waiter)) return false;
    this.wakes++;
    first?.notify(false);
    return first !== undefined;
  }

  leave(ticket: Ticket, acquired: boolean): void {
    const index = this.tickets.indexOf(ticket);
    if (index < 0) return;
    this.tickets.splice(index, 1);
    if (this.tickets.length === 0) return this.owner.drop(this);
    if (index === 0) {
      const next = this.tickets[0];
      // After a grant the lock is taken: the next waits for its release. Otherwise it may be free now.
      if (acquired) next.seen = this.wakes;
      next.notify(!acquired);
    }
  }
}

/** True when `waiter` is among the comma-separated names of `head`. */
function named(head: string, waiter: string): boolean {
  if (head === waiter) return true;
  const at = head.indexOf(waiter);
  return (
    at >= 0 &&
    (at === 0 || head[at - 1] === ',') &&
    (at + waiter.length === head.length || head[at + waiter.length] === ',')
  );
}

/** One caller's place in a queue. */
export class Ticket {
  /** The queue's release count when this waiter last asked the nodes. */
  seen: number;
  /** The name this waiter has in the nodes' lines, once it made an attempt. */
  waiter = '';
  private notifyWaiter: ((tryNow: boolean) => void) | undefined;

  constructor(
    private readonly queue: WaitQueue,
    /** When the acquisition began (epoch ms), its place in the queue. */
    readonly arrival: number,
  ) {
    this.seen = queue.wakes;
  }

  get isHead(): boolean {
    return this.queue.tickets[0] === this;
  }

  /** The keys of the queue. */
  get keys(): readonly string[] {
    return this.queue.keys;
  }

  /** Call before asking the nodes: releases heard before this do not count again. */
  attempting(): void {
    this.seen = this.queue.wakes;
  }

  /**
   * Waits for this caller's next attempt: as head, until a release is heard
   * or `delay` ms pass; behind others, until it becomes head (and then as
   * head). Never past `deadline` (performance.now() time). Rejects when
   * `signal` aborts.
   */
  async wait(delay: number, deadline: number, signal: AbortSignal | undefined): Promise<void> {
    for (;;) {
      const now = performance.now();
      if (now >= deadline) return;
      if (this.isHead && this.queue.wakes !== this.seen) return;
      const head = this.isHead;
      // Nothing to wait for: ask now, not after a timer's shortest delay (about 1 ms, which a
      // short-lived lock's release would then race).
      if (head && delay <= 0) return;
      const tryNow = await new Promise<boolean>((resolve, reject) => {
        const finish = (value: boolean) => {
          clearTimeout(timer);
          signal?.removeEventListener('abort', onAbort);
          this.notifyWaiter = undefined;
          resolve(value);
        };
        const onAbort = () => {
          clearTimeout(timer);
          this.notifyWaiter = undefined;
          reject(signal!.reason);
        };
        if (signal?.aborted) return reject(signal.reason);
        signal?.addEventListener('abort', onAbort, { once: true });
        const timer = setTimeout(
          () => finish(true),
          head ? Math.min(delay, deadline - now) : deadline - now,
        );
        this.notifyWaiter = finish;
      });
      // A release was heard, the delay passed, or the head left without the lock: ask now.
      if (head || tryNow) return;
      // Promoted after the previous head got the lock: wait, as head, for its release, the
      // whole delay (the time spent behind others was no wait for a release).
    }
  }

  /** @internal Wakes this waiter; `tryNow` asks it to try at once. */
  notify(tryNow: boolean): void {
    this.notifyWaiter?.(tryNow);
  }

  /** Leaves the queue; `acquired` tells the next waiter whether the lock was just taken. */
  leave(acquired: boolean): void {
    this.queue.leave(this, acquired);
  }
}
