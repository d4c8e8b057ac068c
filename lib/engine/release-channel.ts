import type { Redis } from 'ioredis';
import type { LockNode } from './lock-node.js';

/** How long a channel stays subscribed after its last waiter left, to spare churn on hot keys. */
const LINGER_MS = 5000;

/**
 * Hears the release script's messages (one channel per lock key, on every
 * node) so waiters wake when a lock is freed instead of sleeping a retry
 * delay. One subscriber connection per node, opened on the first wait;
 * channels are reference-counted.
 */
export class ReleaseChannel {
  private subscribers: (Redis | undefined)[] | undefined;
  private readonly counts = new Map<string, number>();
  private readonly lingering = new Map<string, NodeJS.Timeout>();
  private closed = false;

  constructor(
    private readonly nodes: readonly LockNode[],
    /** Called with the key of every release heard. */
    private readonly onRelease: (key: string) => void,
  ) {}

  /**
   * Subscribes to the keys' channels on every node that answers within
   * `timeoutMs`. Resolves once those subscriptions are in place, so a release
   * after that moment is heard.
   */
  async subscribe(keys: readonly string[], timeoutMs: number): Promise<void> {
    const fresh: string[] = [];
    for (const key of keys) {
      const linger = this.lingering.get(key);
      if (linger) {
        clearTimeout(linger);
        this.lingering.delete(key);
      }
      const count = this.counts.get(key) ?? 0;
      this.counts.set(key, count + 1);
      if (count === 0 && !linger) fresh.push(key);
    }
    if (fresh.length === 0 || this.closed) return;
    const subscribers = this.open();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.allSettled(subscribers.map((s) => s?.subscribe(...fresh))),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, timeoutMs);
        timer.unref();
      }),
    ]);
    clearTimeout(timer);
  }

  /** Drops one reference per key; a channel nobody waits on is unsubscribed after a while. */
  unsubscribe(keys: readonly string[]): void {
    for (const key of keys) {
      const count = (this.counts.get(key) ?? 1) - 1;
      if (count > 0) {
        this.counts.set(key, count);
        continue;
      }
      this.counts.delete(key);
      const timer = setTimeout(() => {
        this.lingering.delete(key);
        if (this.counts.has(key)) return;
        for (const s of this.subscribers ?? []) s?.unsubscribe(key).catch(() => undefined);
      }, LINGER_MS);
      timer.unref();
      this.lingering.set(key, timer);
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const timer of this.lingering.values()) clearTimeout(timer);
    this.lingering.clear();
    const subscribers = this.subscribers ?? [];
    this.subscribers = undefined;
    await Promise.all(
      subscribers.map(async (s) => {
        if (!s) return;
        if (s.status === 'ready') await s.quit().catch(() => s.disconnect());
        else s.disconnect();
      }),
    );
  }

  private open(): (Redis | undefined)[] {
    this.subscribers ??= this.nodes.map((node) => {
      try {
        const subscriber = node.client.duplicate({
          // A subscription waits for its node; the lock attempts never do.
          enableOfflineQueue: true,
          enableAutoPipelining: false,
          lazyConnect: false,
          maxRetriesPerRequest: null,
          disconnectTimeout: 200,
        });
        subscriber.on('error', () => undefined);
        subscriber.on('message', (channel: string) => this.onRelease(channel));
        return subscriber;
      } catch {
        // A client that cannot be duplicated (a Cluster, say): its waiters fall back to polling.
        return undefined;
      }
    });
    return this.subscribers;
  }
}
