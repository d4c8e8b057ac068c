/**
 * A TCP fault proxy of our own (there is no toxiproxy here): one listening
 * port in front of one redis-server, with a fault that can be switched while
 * clients are connected.
 *
 * - `pass`: bytes flow both ways unchanged.
 * - `delay`: every chunk is held `ms` before it is passed on (replies only,
 *   requests only, or both), in order.
 * - `drop`: every connection is reset, and new ones are reset on accept.
 * - `blackhole`: connections are accepted but nothing is forwarded either way.
 * - `one-way`: requests reach the server, replies are thrown away (the
 *   commands run; the client never hears).
 *
 * A connection that lost bytes (blackhole, one-way) is reset when the fault is
 * lifted: its RESP stream is no longer in step, as a TCP connection whose
 * peer vanished would time out. Closing either side always closes the other,
 * so a client that exits leaves no connection on the server behind it.
 *
 * Traps stop a connection at a precise point of the protocol: `trap()` waits
 * for a request containing a marker (a script SHA and a key, say), then holds
 * that connection's replies or its further requests until released, so a
 * test can pause the client or kill the node while a reply is in flight.
 */
import { EventEmitter, once } from 'node:events';
import { createConnection, createServer, type Server, type Socket } from 'node:net';

export type Fault =
  | { readonly kind: 'pass' }
  | {
      readonly kind: 'delay';
      readonly ms: number;
      /** Default 'replies'. */
      readonly direction?: 'replies' | 'requests' | 'both';
    }
  | { readonly kind: 'drop' }
  | { readonly kind: 'blackhole' }
  | { readonly kind: 'one-way' };

export const PASS: Fault = Object.freeze({ kind: 'pass' });

type Direction = 'requests' | 'replies';

/** A connection a trap caught; its held bytes flow once released. */
export interface TrappedLink {
  /** Passes on what was held, and everything after it, in order. */
  release(): void;
  /** Resets both sides, dropping what was held. */
  sever(): void;
}

interface Trap {
  readonly markers: readonly string[];
  readonly hold: Direction;
  readonly caught: (link: TrappedLink) => void;
}

/** Bytes kept from the end of the previous chunk, so a marker split across chunks is still seen. */
const MARKER_TAIL = 256;

class Link {
  tainted = false;
  private closed = false;
  private tail = '';
  private readonly held: Record<Direction, Buffer[] | undefined> = {
    requests: undefined,
    replies: undefined,
  };
  private readonly delayed: Record<Direction, { at: number; chunk: Buffer }[]> = {
    requests: [],
    replies: [],
  };
  private readonly timers: Record<Direction, NodeJS.Timeout | undefined> = {
    requests: undefined,
    replies: undefined,
  };

  constructor(
    private readonly proxy: FaultProxy,
    readonly client: Socket,
    readonly server: Socket,
  ) {
    client.on('data', (chunk: Buffer) => this.forward('requests', chunk));
    server.on('data', (chunk: Buffer) => this.forward('replies', chunk));
    for (const socket of [client, server]) {
      socket.on('error', () => this.close());
      socket.on('close', () => this.close());
    }
  }

  /** Ends both sides; `reset` sends RST instead of FIN. */
  close(reset = false): void {
    if (this.closed) return;
    this.closed = true;
    for (const timer of Object.values(this.timers)) clearTimeout(timer);
    for (const socket of [this.client, this.server]) {
      if (reset && canReset(socket)) socket.resetAndDestroy();
      else socket.destroy();
    }
    this.proxy.forget(this);
  }

  hold(direction: Direction): TrappedLink {
    this.held[direction] ??= [];
    return {
      release: () => {
        const chunks = this.held[direction] ?? [];
        this.held[direction] = undefined;
        for (const chunk of chunks) this.deliver(direction, chunk);
      },
      sever: () => {
        this.held[direction] = undefined;
        this.close(true);
      },
    };
  }

  private forward(direction: Direction, chunk: Buffer): void {
    if (this.closed) return;
    if (direction === 'requests') this.proxy.inspect(this, this.scan(chunk));
    const fault = this.proxy.fault;
    if (fault.kind === 'blackhole' || (fault.kind === 'one-way' && direction === 'replies')) {
      this.tainted = true;
      this.proxy.stats.droppedBytes += chunk.length;
      return;
    }
    const held = this.held[direction];
    if (held) {
      held.push(chunk);
      return;
    }
    this.deliver(direction, chunk);
  }

  /** The text a trap looks for: the new chunk with the end of the previous one. */
  private scan(chunk: Buffer): string {
    const text = this.tail + chunk.toString('latin1');
    this.tail = text.slice(-MARKER_TAIL);
    return text;
  }

  private deliver(direction: Direction, chunk: Buffer): void {
    const fault = this.proxy.fault;
    const queue = this.delayed[direction];
    const delay =
      fault.kind === 'delay' &&
      ((fault.direction ?? 'replies') === 'both' || (fault.direction ?? 'replies') === direction)
        ? fault.ms
        : 0;
    if (delay === 0 && queue.length === 0) {
      this.write(direction, chunk);
      return;
    }
    // One FIFO per direction: a chunk never overtakes an earlier one.
    const at = Math.max(performance.now() + delay, queue.at(-1)?.at ?? 0);
    queue.push({ at, chunk });
    if (!this.timers[direction]) this.pump(direction);
  }

  private pump(direction: Direction): void {
    const queue = this.delayed[direction];
    this.timers[direction] = undefined;
    while (queue.length > 0 && queue[0].at <= performance.now()) {
      this.write(direction, queue.shift()!.chunk);
    }
    if (queue.length > 0 && !this.closed) {
      this.timers[direction] = setTimeout(
        () => this.pump(direction),
        Math.max(0, queue[0].at - performance.now()),
      );
    }
  }

  private write(direction: Direction, chunk: Buffer): void {
    const target = direction === 'requests' ? this.server : this.client;
    if (!target.destroyed) target.write(chunk);
  }
}

/**
 * Whether an RST can be sent on `socket`. Not while it connects, and not once
 * it is ending: after the peer's FIN, Node ends our side too, and libuv
 * refuses to reset a stream with a shutdown pending (EINVAL), which leaves
 * the socket's handle open for good and keeps the process from exiting.
 */
function canReset(socket: Socket): boolean {
  return !socket.destroyed && !socket.connecting && !socket.writableEnded && !socket.readableEnded;
}

export interface FaultProxyStats {
  connections: number;
  droppedBytes: number;
  resets: number;
}

/** One proxy in front of one node. */
export class FaultProxy extends EventEmitter {
  fault: Fault = PASS;
  readonly stats: FaultProxyStats = { connections: 0, droppedBytes: 0, resets: 0 };
  private readonly links = new Set<Link>();
  private traps: Trap[] = [];

  private constructor(
    private readonly server: Server,
    readonly port: number,
    /** The node's port; may change if the node is restarted elsewhere (it is not, here). */
    public targetPort: number,
    readonly host: string,
  ) {
    super();
  }

  /** Listens on a free loopback port and forwards to `targetPort`. */
  static async start(targetPort: number, host = '127.0.0.1'): Promise<FaultProxy> {
    const server = createServer({ noDelay: true });
    server.listen(0, host);
    await once(server, 'listening');
    const address = server.address();
    if (typeof address !== 'object' || !address) throw new Error('fault proxy did not bind');
    const proxy = new FaultProxy(server, address.port, targetPort, host);
    server.on('connection', (client) => proxy.accept(client));
    return proxy;
  }

  get url(): string {
    return `redis://${this.host}:${this.port}`;
  }

  get openConnections(): number {
    return this.links.size;
  }

  /** Resolves once no connection is open, or after `timeoutMs` (see openConnections). */
  drained(timeoutMs: number): Promise<void> {
    if (this.links.size === 0) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.off('link-closed', onClosed);
        resolve();
      };
      const onClosed = () => {
        if (this.links.size === 0) done();
      };
      const timer = setTimeout(done, timeoutMs);
      this.on('link-closed', onClosed);
    });
  }

  /** Switches the fault for current and future connections. */
  set(fault: Fault): void {
    const previous = this.fault;
    this.fault = fault;
    if (fault.kind === 'drop') {
      for (const link of [...this.links]) this.reset(link);
    } else if (
      (previous.kind === 'blackhole' || previous.kind === 'one-way') &&
      fault.kind !== previous.kind
    ) {
      for (const link of [...this.links]) if (link.tainted) this.reset(link);
    }
  }

  /**
   * Resolves with the first connection that sends a request containing every
   * one of `markers`; from then on its `hold` direction is held until the
   * trapped link is released or severed. One connection per call.
   */
  trap(markers: readonly string[], hold: Direction): Promise<TrappedLink> {
    return new Promise((caught) => this.traps.push({ markers, hold, caught }));
  }

  /** Forgets the traps that have not caught anything yet. */
  disarm(): void {
    this.traps = [];
  }

  /** Resets every connection (as if the node's host rebooted). */
  resetAll(): void {
    for (const link of [...this.links]) this.reset(link);
  }

  async close(): Promise<void> {
    this.traps = [];
    for (const link of [...this.links]) link.close(true);
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  /** @internal */
  inspect(link: Link, text: string): void {
    if (this.traps.length === 0) return;
    const index = this.traps.findIndex((trap) => trap.markers.every((m) => text.includes(m)));
    if (index < 0) return;
    const [trap] = this.traps.splice(index, 1);
    trap.caught(link.hold(trap.hold));
  }

  /** @internal */
  forget(link: Link): void {
    if (this.links.delete(link)) this.emit('link-closed');
  }

  private reset(link: Link): void {
    this.stats.resets++;
    link.close(true);
  }

  private accept(client: Socket): void {
    this.stats.connections++;
    if (this.fault.kind === 'drop') {
      this.stats.resets++;
      client.on('error', () => undefined);
      client.resetAndDestroy();
      return;
    }
    client.setNoDelay(true);
    const server = createConnection({ port: this.targetPort, host: this.host, noDelay: true });
    this.links.add(new Link(this, client, server));
  }
}
