import type { Redis } from 'ioredis';

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
