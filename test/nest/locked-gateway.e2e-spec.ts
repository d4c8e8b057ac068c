import 'reflect-metadata';
import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, Module, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ExpressAdapter } from '@nestjs/platform-express';
import {
  ConnectedSocket,
  MessageBody,
  SubscribeMessage,
  WebSocketGateway,
  WsException,
} from '@nestjs/websockets';
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
import { MemoryWsAdapter, type MemorySocket } from '../support/memory-ws-adapter.js';
import { quietLogger } from '../support/quiet-logger.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';

const redis = useRedisNodes(3);
const latches = new Latches();

interface BasketMessage {
  id?: string;
  gate?: string;
}

@Injectable()
class BasketStore {
  tokenSeenByService(): number | undefined {
    return LockContext.token;
  }
}

@WebSocketGateway()
class BasketGateway {
  constructor(private readonly store: BasketStore) {}

  @SubscribeMessage('basket.add')
  @Locked('basket:<0.id>', { wait: false })
  async add(
    @MessageBody() body: BasketMessage,
    @ConnectedSocket() socket: MemorySocket,
    @FencingToken() token?: number,
  ) {
    if (body.gate) await latches.enter(body.gate);
    return {
      id: body.id,
      token,
      tokenSeenByService: this.store.tokenSeenByService(),
      tokenOnSocket: getRequestLocks(socket)?.token,
    };
  }

  @SubscribeMessage('basket.close')
  @Locked('basket:<0.id>', { wait: false })
  close(@MessageBody() body: BasketMessage): never {
    throw new WsException({ code: 'BASKET_CLOSED', id: body.id });
  }
}

@Module({
  imports: [
    RedisLockModule.forRootAsync({
      useFactory: () => ({ nodes: redis.nodes.map((n) => n.url), logger: quietLogger() }),
    }),
  ],
  providers: [BasketGateway, BasketStore],
})
class BasketModule {}

describe('@Locked on a WebSocket gateway handler (in-memory adapter)', () => {
  let app: INestApplication;
  let adapter: MemoryWsAdapter;
  let locks: LockService;

  beforeAll(async () => {
    app = await NestFactory.create(BasketModule, new ExpressAdapter(), { logger: false });
    adapter = new MemoryWsAdapter();
    app.useWebSocketAdapter(adapter);
    await app.init();
    locks = app.get(LockService);
  });
  afterAll(async () => {
    await app?.close();
  });
  afterEach(() => latches.reset());

  it('answers one of two concurrent messages for one key and gives the other a WsException with code LOCK_BUSY', async () => {
    const first = adapter.connect().request('basket.add', { id: 'b1', gate: 'b1' });
    await latches.entered('b1');
    const refused = (await adapter
      .connect()
      .request('basket.add', { id: 'b1' })
      .catch((e: unknown) => e)) as LockFailureBody;
    expect(refused).toMatchObject({ statusCode: 409, code: 'LOCK_BUSY' });
    expect(refused.retryAfter).toBeGreaterThan(0);
    latches.open('b1');
    expect(await first).toMatchObject({ id: 'b1', token: expect.any(Number) });
  });

  it('gives the fencing token to the handler, to a service it calls, and to the socket', async () => {
    const reply = await adapter
      .connect()
      .request<Record<string, number>>('basket.add', { id: 'b2' });
    expect(reply.token).toEqual(expect.any(Number));
    expect(reply.tokenSeenByService).toBe(reply.token);
    expect(reply.tokenOnSocket).toBe(reply.token);
  });

  it("passes the handler's own WsException through untouched, and releases the lock", async () => {
    const released = nextLockEvent(locks, 'released', 'basket:b3');
    const error = await adapter
      .connect()
      .request('basket.close', { id: 'b3' })
      .catch((e: unknown) => e);
    expect(error).toEqual({ code: 'BASKET_CLOSED', id: 'b3' });
    await released;
  });

  it('answers a message without the key value with a WsException carrying LOCK_INVALID_KEY', async () => {
    const error = await adapter
      .connect()
      .request('basket.add', {})
      .catch((e: unknown) => e);
    expect(error).toMatchObject({ statusCode: 400, code: 'LOCK_INVALID_KEY' });
  });
});
