import 'reflect-metadata';
import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { Controller, Injectable, Module, type INestMicroservice } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import {
  ClientProxyFactory,
  Ctx,
  MessagePattern,
  Payload,
  RpcException,
  TcpContext,
  Transport,
  type ClientProxy,
  type MicroserviceOptions,
} from '@nestjs/microservices';
import type { AddressInfo, Server } from 'node:net';
import { firstValueFrom, interval, map, Observable, take, toArray } from 'rxjs';
import {
  FencingToken,
  getRequestLocks,
  LockContext,
  Locked,
  LockService,
  RedisLockModule,
  type LockFailureBody,
} from '../../lib/index.js';
import { Latches } from '../support/latch.js';
import { nextLockEvent } from '../support/lock-events.js';
import { quietLogger } from '../support/quiet-logger.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';

const redis = useRedisNodes(3);
const latches = new Latches();

interface StockMessage {
  sku?: string;
  gate?: string;
}

/** A service the handler calls: it sees the handler's lock through LockContext. */
@Injectable()
class StockLedger {
  constructor(private readonly lockContext: LockContext) {}

  tokenSeenByService(): number | undefined {
    return this.lockContext.token;
  }
}

@Controller()
class StockHandlers {
  constructor(private readonly ledger: StockLedger) {}

  @MessagePattern('stock.reserve')
  @Locked('stock:<0.sku>', { wait: false })
  async reserve(
    @Payload() data: StockMessage,
    @Ctx() context: TcpContext,
    @FencingToken() token?: number,
  ) {
    if (data.gate) await latches.enter(data.gate);
    return {
      sku: data.sku,
      token,
      tokenSeenByService: this.ledger.tokenSeenByService(),
      tokenOnContext: getRequestLocks(context)?.token,
    };
  }

  @MessagePattern('stock.queue')
  @Locked('stock:<0.sku>')
  async queue(@Payload() data: StockMessage, @FencingToken() token?: number) {
    if (data.gate) await latches.enter(data.gate);
    latches.log.push(`done:${data.gate}`);
    return { sku: data.sku, token };
  }

  @MessagePattern('stock.sold-out')
  @Locked('stock:<0.sku>', { wait: false })
  soldOut(@Payload() data: StockMessage): never {
    throw new RpcException({ code: 'SOLD_OUT', sku: data.sku });
  }

  @MessagePattern('stock.count')
  @Locked('stock:<0.sku>', { wait: false })
  count(@Payload() _data: StockMessage): Observable<number> {
    return interval(5).pipe(
      take(3),
      map((n) => n + 1),
    );
  }

  @MessagePattern('stock.fast')
  @Locked('stock:<0.sku>', { wait: false, ttl: 1000 })
  async fast(@Payload() data: StockMessage) {
    return { sku: data.sku };
  }
}

@Module({
  imports: [
    RedisLockModule.forRootAsync({
      useFactory: () => ({ nodes: redis.nodes.map((n) => n.url), logger: quietLogger() }),
    }),
  ],
  controllers: [StockHandlers],
  providers: [StockLedger],
})
class StockModule {}

describe('@Locked on a microservice handler (TCP transport)', () => {
  let app: INestMicroservice;
  let client: ClientProxy;
  let locks: LockService;

  beforeAll(async () => {
    app = await NestFactory.createMicroservice<MicroserviceOptions>(StockModule, {
      transport: Transport.TCP,
      // Port 0: the kernel picks a free port, read back from the server.
      options: { host: '127.0.0.1', port: 0 },
      logger: false,
    });
    await app.listen();
    const { port } = app.unwrap<Server>().address() as AddressInfo;
    client = ClientProxyFactory.create({
      transport: Transport.TCP,
      options: { host: '127.0.0.1', port },
    });
    await client.connect();
    locks = app.get(LockService);
  });
  afterAll(async () => {
    client?.close();
    await app?.close();
  });
  afterEach(() => latches.reset());

  const send = <T>(pattern: string, data: StockMessage) =>
    firstValueFrom(client.send<T, StockMessage>(pattern, data));
  const rpcError = (pattern: string, data: StockMessage) =>
    send(pattern, data).then(
      () => {
        throw new Error(`${pattern} succeeded, but an RPC error was expected`);
      },
      (error: unknown) => error as Record<string, unknown>,
    );

  it('answers one of two concurrent messages for one key and gives the other an RPC error with code LOCK_BUSY (wait: false)', async () => {
    const first = send<{ sku: string }>('stock.reserve', { sku: 'A1', gate: 'a1' });
    await latches.entered('a1');
    const error = (await rpcError('stock.reserve', { sku: 'A1' })) as unknown as LockFailureBody;
    expect(error).toMatchObject({ statusCode: 409, error: 'Conflict', code: 'LOCK_BUSY' });
    expect(error.retryAfter).toBeGreaterThan(0);
    expect(error.message).toMatch(/^Busy: another request holds the lock/);
    latches.open('a1');
    expect(await first).toMatchObject({ sku: 'A1' });
    expect(latches.count('a1')).toBe(1);
  });

  it('serves two concurrent messages for one key one after the other when waiting', async () => {
    const contended = nextLockEvent(locks, 'contended', 'stock:Q1');
    const first = send('stock.queue', { sku: 'Q1', gate: 'q1' });
    await latches.entered('q1');
    const second = send('stock.queue', { sku: 'Q1', gate: 'q2' });
    await contended;
    expect(latches.count('q2')).toBe(0);
    latches.open('q1');
    latches.open('q2');
    await Promise.all([first, second]);
    expect(latches.log).toEqual(['q1', 'done:q1', 'q2', 'done:q2']);
  });

  it('serves messages for distinct keys in parallel', async () => {
    const a = send('stock.reserve', { sku: 'P1', gate: 'p1' });
    const b = send('stock.reserve', { sku: 'P2', gate: 'p2' });
    await Promise.all([latches.entered('p1'), latches.entered('p2')]);
    latches.open('p1');
    latches.open('p2');
    await expect(Promise.all([a, b])).resolves.toHaveLength(2);
  });

  it('gives the fencing token to the handler, to a service it calls, and to the RPC context', async () => {
    const first = await send<Record<string, number>>('stock.reserve', { sku: 'T1' });
    expect(first.token).toEqual(expect.any(Number));
    expect(first.tokenSeenByService).toBe(first.token);
    expect(first.tokenOnContext).toBe(first.token);
    const second = await send<Record<string, number>>('stock.reserve', { sku: 'T1' });
    expect(second.token).toBeGreaterThan(first.token);
  });

  it("passes the handler's own RpcException through untouched, and releases the lock", async () => {
    const released = nextLockEvent(locks, 'released', 'stock:S1');
    expect(await rpcError('stock.sold-out', { sku: 'S1' })).toEqual({
      code: 'SOLD_OUT',
      sku: 'S1',
    });
    await released;
    await (await locks.tryAcquire('stock:S1')).release();
  });

  it('answers a message whose key value is missing with an RPC error carrying LOCK_INVALID_KEY', async () => {
    const error = await rpcError('stock.reserve', {});
    expect(error).toMatchObject({ statusCode: 400, code: 'LOCK_INVALID_KEY' });
    expect(error.message).toContain('<0.sku> is undefined');
  });

  it('holds the lock of an Observable handler until its stream completes', async () => {
    const acquired = nextLockEvent(locks, 'acquired', 'stock:C1');
    const released = nextLockEvent(locks, 'released', 'stock:C1');
    const values = firstValueFrom(
      client.send<number>('stock.count', { sku: 'C1' }).pipe(toArray()),
    );
    await acquired;
    await expect(locks.tryAcquire('stock:C1')).rejects.toMatchObject({ code: 'LOCK_BUSY' });
    expect(await values).toEqual([1, 2, 3]);
    await released;
    await (await locks.tryAcquire('stock:C1')).release();
  });

  it('answers with an RPC error carrying LOCK_UNAVAILABLE, not LOCK_BUSY, when a majority of nodes does not answer', async () => {
    await Promise.all([redis.nodes[0].pause(), redis.nodes[1].pause()]);
    try {
      const error = await rpcError('stock.fast', { sku: 'U1' });
      expect(error).toMatchObject({ statusCode: 503, code: 'LOCK_UNAVAILABLE' });
      // The body says what happened without the nodes' addresses.
      expect(error.message).toBe('The lock service is unavailable; try again later.');
    } finally {
      await Promise.all([redis.nodes[0].resume(), redis.nodes[1].resume()]);
    }
    expect(await send('stock.fast', { sku: 'U1' })).toEqual({ sku: 'U1' });
  });
});
