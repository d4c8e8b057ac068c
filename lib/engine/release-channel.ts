import type { Cluster, Redis } from 'ioredis';
import { closeSentinelWatch, type LockNode } from './lock-node.js';
import { isClusterClient } from './node-specs.js';
import { waitersChannel } from './rw-lua.js';
import { hearClusterSockets, hearSocketErrors } from './socket-errors.js';
import { bounded } from './time-bound.js';

/** How long a channel stays subscribed after its last waiter left, to spare churn on hot keys. */
const LINGER_MS = 5000;

/** One node's subscriber connection(s), whatever the node's topology. */
interface Subscriber {
  /** The subscriber's own client. */
  readonly connection: Redis | Cluster;
  subscribe(keys: readonly string[]): Promise<unknown>;
  unsubscribe(key: string): Promise<unknown>;
  close(): Promise<void>;
}

/**
 * Hears the release script's messages (one channel per lock key, on every
 * node, and the engine's own channel for releases that name one of its
 * waiters) so waiters wake when a lock is freed instead of sleeping a retry
 * delay. One subscriber connection per node (per master of a cluster),
 * opened on the first wait; key channels are reference-counted, the own
 * channel stays until the engine closes.
 */
export class ReleaseChannel {
  private subscribers: (Subscriber | undefined)[] | undefined;
  private readonly counts = new Map<string, number>();
  private readonly lingering = new Map<string, NodeJS.Timeout>();
  /** Keys whose subscriptions every node confirmed, until they are dropped. */
  private readonly confirmed = new Set<string>();
  private closed = false;

  /** Parses a message (see TELL_LUA) and passes it on unless this engine sent it. */
  private readonly onMessage: (channel: string, message: string) => void;
  /** This engine's own channel, where releases that name its waiters come (see TELL_LUA). */
  private readonly own: string;
  /** Set once every server node confirmed the subscription to `own`. */
  private ownHeard = false;
  /** Settles once `own` is subscribed on every server node, or could not be; never rejects. */
  private ownSettled: Promise<unknown> = Promise.resolve();
  /** How many waiters were named after this engine (see waiterName). */
  private named = 0;

  constructor(
    private readonly nodes: readonly LockNode[],
    /**
     * Called with the key of every release heard, and the waiter it names
     * first in line ('' for none).
     */
    onRelease: (key: string, head: string) => void,
    /** The sender name of this engine's releases, whose messages it skips. */
    private readonly self: string,
    keyPrefix: string,
  ) {
    const own = (this.own = waitersChannel(keyPrefix, self));
    this.onMessage = (channel, message) => {
      const space = message.indexOf(' ');
      // On the engine's own channel: '<head> <key>'; on a key's: '<head> <sender>' (or '<head>').
      if (channel === own) return onRelease(message.slice(space + 1), message.slice(0, space));
      if (space < 0) return onRelease(channel, message);
      if (message.slice(space + 1) !== self) onRelease(channel, message.slice(0, space));
    };
  }

  /**
   * The name a waiter gets in the nodes' lines, given its first attempt's
   * value. Once every server node confirmed this engine's own channel, it is
   * `<sender>.<n>`: a release that names it goes to this engine alone (see
   * TELL_LUA). Before that (or where that subscription is refused, by an ACL
   * without `&<keyPrefix>*`, say), it is the value, and the release that
   * names it goes to the key's channel, which every waiting process hears.
   */
  waiterName(value: string): string {
    return this.ownHeard ? `${this.self}.${(++this.named).toString(36)}` : value;
  }

  /**
   * @internal For tests: once the subscription to this engine's own channel
   * (made by the first wait) settled, whether every node confirmed it.
   */
  ownChannelReady(): Promise<boolean> {
    return this.ownSettled.then(() => this.ownHeard);
  }

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
    // A node that does not answer in time is not waited for: its subscription completes later.
    // The engine's own channel (subscribed first, on the same connections) is settled with them:
    // once a waiter waits, the names of later ones are known (see waiterName).
    const everyNode = await bounded(
      Promise.allSettled([...subscribers.map((s) => s?.subscribe(fresh)), this.ownSettled]),
      timeoutMs,
      { unref: true },
    ).then(
      (results) =>
        results.every((r) => r.status === 'fulfilled') && !subscribers.includes(undefined),
      () => false,
    );
    if (!everyNode || this.closed) return;
    for (const key of fresh) if (this.counts.has(key)) this.confirmed.add(key);
  }

  /**
   * True when every node confirmed the subscription to every key's channel
   * (and it was not dropped since): a release from any process is heard.
   */
  listening(keys: readonly string[]): boolean {
    return this.confirmed.size > 0 && keys.every((key) => this.confirmed.has(key));
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
        this.confirmed.delete(key);
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
    this.confirmed.clear();
    const subscribers = this.subscribers ?? [];
    this.subscribers = undefined;
    await Promise.all(subscribers.map((s) => s?.close()));
  }

  private open(): (Subscriber | undefined)[] {
    if (this.subscribers) return this.subscribers;
    const subscribers = (this.subscribers = this.nodes.map((node) => {
      try {
        const { client } = node;
        return isClusterClient(client)
          ? shardSubscriber(client, this.onMessage)
          : serverSubscriber(client, this.onMessage);
      } catch {
        // A client that cannot be duplicated: its waiters fall back to polling.
        return undefined;
      }
    }));
    // A cluster's releases stay on the key's shard channel: only servers need the engine's own.
    if (!subscribers.includes(undefined)) {
      this.ownSettled = Promise.all(
        subscribers.map((s) => !isClusterClient(s!.connection) && s!.subscribe([this.own])),
      ).then(
        () => (this.ownHeard = !this.closed),
        () => undefined,
      );
    }
    return subscribers;
  }
}

/**
 * A server's (or a Sentinel-managed master's: the duplicate finds it through
 * Sentinel too) subscriber: plain SUBSCRIBE to the keys' channels.
 */
function serverSubscriber(
  client: Redis,
  onRelease: (key: string, head: string) => void,
): Subscriber {
  const subscriber = client.duplicate({
    // A subscription waits for its node; the lock attempts never do.
    enableOfflineQueue: true,
    enableAutoPipelining: false,
    lazyConnect: false,
    maxRetriesPerRequest: null,
    disconnectTimeout: 200,
    // ioredis's own resubscription after a reconnect leaves its promise unhandled: closing
    // meanwhile would crash the process. This one re-subscribes itself, errors handled.
    autoResubscribe: false,
  });
  const channels = new Set<string>();
  let connected = false;
  subscriber.on('error', () => undefined);
  hearSocketErrors(subscriber);
  subscriber.on('message', onRelease);
  subscriber.on('ready', () => {
    if (connected && channels.size > 0) {
      subscriber.subscribe(...channels).catch(() => undefined);
    }
    connected = true;
  });
  return {
    connection: subscriber,
    subscribe: (keys) => {
      for (const key of keys) channels.add(key);
      return subscriber.subscribe(...keys);
    },
    unsubscribe: (key) => {
      channels.delete(key);
      return subscriber.unsubscribe(key);
    },
    close: () => closeClient(subscriber),
  };
}

/**
 * A cluster's subscriber: sharded pub/sub (SSUBSCRIBE, Redis 7), which the
 * release script feeds with SPUBLISH. A shard channel lives in the slot of
 * its name, here the lock key, so each message stays on the key's shard
 * instead of being broadcast over the cluster bus to every node as PUBLISH
 * is. The duplicate keeps one subscriber connection per master and routes
 * each SSUBSCRIBE to the master of its slot (ioredis >= 5.6,
 * `shardedSubscribers`). Where that is missing (Redis 6, older ioredis) the
 * subscriptions fail and waiters fall back to polling at their retry delay.
 */
function shardSubscriber(
  client: Cluster,
  onRelease: (key: string, head: string) => void,
): Subscriber {
  const subscriber = client.duplicate([], {
    shardedSubscribers: true,
    enableOfflineQueue: true,
    enableAutoPipelining: false,
    lazyConnect: false,
    redisOptions: { ...client.options.redisOptions, maxRetriesPerRequest: null },
  });
  subscriber.on('error', () => undefined);
  hearClusterSockets(subscriber);
  subscriber.on('smessage', onRelease);
  return {
    connection: subscriber,
    // One command per key: the keys of one SSUBSCRIBE must share a slot.
    subscribe: (keys) => Promise.all(keys.map((key) => subscriber.ssubscribe(key))),
    unsubscribe: (key) => subscriber.sunsubscribe(key),
    close: () => closeClient(subscriber),
  };
}

async function closeClient(client: Redis | Cluster): Promise<void> {
  // Bounded: a paused node never answers QUIT.
  const answered =
    client.status === 'ready' &&
    (await bounded(client.quit(), 1000, { unref: true }).then(
      () => true,
      () => false,
    ));
  if (!answered) client.disconnect();
  if (!isClusterClient(client)) closeSentinelWatch(client);
}
