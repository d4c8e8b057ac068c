/**
 * A WebSocket adapter for Nest that keeps its sockets in memory: no platform
 * adapter (`@nestjs/platform-ws`, `@nestjs/platform-socket.io`) is installed
 * here, and gateway tests need Nest's WebSocket pipeline (context type 'ws',
 * interceptors, exception filters), not a network.
 *
 * ```ts
 * const adapter = new MemoryWsAdapter();
 * app.useWebSocketAdapter(adapter);
 * await app.init();
 * const socket = adapter.connect();
 * await socket.request('basket.add', { id: 'b1' });
 * ```
 */
import type { WebSocketAdapter, WsMessageHandler } from '@nestjs/common';
import { EventEmitter } from 'node:events';
import type { Observable } from 'rxjs';

/**
 * One connected client. Nest writes to it with `emit` (its exception filter
 * emits 'exception'), so listeners on the socket hear what the gateway sends.
 */
export class MemorySocket extends EventEmitter {
  /** Messages from the client to the gateway. */
  readonly incoming = new EventEmitter();

  /**
   * Sends `event` to the gateway. Resolves with the handler's reply (the
   * acknowledgement), or rejects with the payload of the 'exception' the
   * gateway emits instead. One request at a time per socket.
   */
  request<T>(event: string, data: unknown): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const onException = (payload: unknown) => reject(payload as Error);
      this.once('exception', onException);
      const delivered = this.incoming.emit(event, data, (reply: T) => {
        this.off('exception', onException);
        resolve(reply);
      });
      if (!delivered) reject(new Error(`no gateway handles '${event}'`));
    });
  }
}

class MemoryServer extends EventEmitter {
  close(): void {
    this.removeAllListeners();
  }
}

export class MemoryWsAdapter implements WebSocketAdapter<MemoryServer, MemorySocket> {
  private readonly servers: MemoryServer[] = [];

  /** Connects a new client to the (first) gateway server. */
  connect(): MemorySocket {
    const socket = new MemorySocket();
    this.servers[0].emit('connection', socket);
    return socket;
  }

  create(): MemoryServer {
    const server = new MemoryServer();
    this.servers.push(server);
    return server;
  }

  bindClientConnect(server: MemoryServer, callback: (socket: MemorySocket) => void): void {
    server.on('connection', callback);
  }

  bindMessageHandlers(
    socket: MemorySocket,
    handlers: WsMessageHandler[],
    transform: (data: unknown) => Observable<unknown>,
  ): void {
    for (const { message, callback } of handlers) {
      socket.incoming.on(message, (data: unknown, ack: (reply: unknown) => void) => {
        transform(callback(data, ack)).subscribe((reply) => {
          if (reply !== undefined && reply !== null) ack(reply);
        });
      });
    }
  }

  close(server: MemoryServer): void {
    server.close();
  }

  /** Called by `app.close()`. */
  async dispose(): Promise<void> {
    for (const server of this.servers.splice(0)) server.close();
  }
}
