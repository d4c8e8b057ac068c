import type { Cluster, Redis } from 'ioredis';

/** The sockets and clients already heard. */
const heard = new WeakSet<object>();
const ignore = () => undefined;

/**
 * Keeps a client's sockets heard after ioredis stops listening to them.
 *
 * ioredis listens for only the first `'error'` of each socket. A TLS socket
 * can emit a second one: after the client refused the server's certificate,
 * the server's alert arrives ("tlsv1 alert decode error", a few times in ten
 * thousand refused handshakes on a busy machine). Unheard, that second error
 * is thrown as an uncaught exception and ends the process. Each socket the
 * client connected or saw fail gets a listener of its own; the client's
 * `'error'` events, which the engine reads, are unchanged.
 */
export function hearSocketErrors(client: Redis): void {
  if (heard.has(client)) return;
  heard.add(client);
  const hear = () => {
    const socket = client.stream as Redis['stream'] | undefined;
    if (!socket || heard.has(socket)) return;
    heard.add(socket);
    socket.on('error', ignore);
  };
  // 'error' comes while the failed socket is still the client's (a reconnect replaces it later).
  client.on('error', hear);
  client.on('connect', hear);
}

/** ioredis's group of sharded subscribers (a private field of a Cluster made with `shardedSubscribers`). */
interface ShardedSubscriberGroup {
  readonly shardedSubscribers?: ReadonlyMap<string, { getInstance?(): Redis | null }>;
}

/**
 * {@link hearSocketErrors} for every connection of a cluster client: each
 * master's, known now or added later (`'+node'`), and each sharded
 * subscriber's. ioredis makes a sharded subscriber's client inside its
 * subscriber group and announces it only as `'+subscriber'`, without the
 * client, so the group is read for the clients it holds then.
 */
export function hearClusterSockets(cluster: Cluster): void {
  for (const node of cluster.nodes('all')) hearSocketErrors(node);
  cluster.on('+node', hearSocketErrors);
  const hearShards = () => {
    const group = (cluster as unknown as { shardedSubscribers?: ShardedSubscriberGroup })
      .shardedSubscribers;
    for (const shard of group?.shardedSubscribers?.values() ?? []) {
      const client = shard.getInstance?.();
      if (client) hearSocketErrors(client);
    }
  };
  // Emitted right after the subscriber starts to connect, before its socket can fail.
  cluster.on('+subscriber', hearShards);
  hearShards();
}
