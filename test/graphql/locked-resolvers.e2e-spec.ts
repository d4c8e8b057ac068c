import 'reflect-metadata';
import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import {
  Injectable,
  Module,
  type DynamicModule,
  type INestApplication,
  type Type,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import {
  Args,
  Context,
  GraphQLModule,
  Mutation,
  Query,
  Resolver,
  Subscription,
} from '@nestjs/graphql';
import { MercuriusDriver, type MercuriusDriverConfig } from '@nestjs/mercurius';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import type { GraphQLFormattedError } from 'graphql';
import type { Client } from 'graphql-ws';
import { Redis } from 'ioredis';
import {
  FencingToken,
  getRequestLocks,
  LockContext,
  Locked,
  LockService,
  LockSignal,
  RedisLockModule,
} from '../../lib/index.js';
import { deferred, Latches, type Deferred } from '../support/latch.js';
import { nextLockEvent } from '../support/lock-events.js';
import { quietLogger } from '../support/quiet-logger.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';
import {
  postGraphQL,
  Subscription as ClientSubscription,
  SubscriptionRefused,
  subscriptionClient,
  type GraphQLResponse,
} from './graphql-client.js';

const redis = useRedisNodes(3);
const latches = new Latches();

const typeDefs = /* GraphQL */ `
  type Payment {
    id: ID!
    token: Float
    tokenSeenByService: Float
    tokensOfOperation: [Float!]
  }

  type Receipt {
    n: Int!
    token: Float
    tokenSeenByFeed: Float
    tokenInContext: Float
  }

  type Query {
    payment(id: ID!): Payment
  }

  type Mutation {
    pay(id: ID, gate: String): Payment
    queue(id: ID!): Payment
    payFast(id: ID!): Payment
    refund(id: ID!): Boolean
    settle(id: ID!, gate: String!): Boolean
  }

  type Subscription {
    receipts(id: ID!): Receipt
  }
`;

interface Payment {
  id: string;
  token: number | null;
  tokenSeenByService: number | null;
  tokensOfOperation: number[] | null;
}

interface Receipt {
  n: number;
  token: number | null;
  tokenSeenByFeed: number | null;
  tokenInContext: number | null;
}

@Injectable()
class Ledger {
  /** A service the resolver calls: it sees the resolver's lock through LockContext. */
  tokenSeenByService(): number | undefined {
    return LockContext.token;
  }
}

/**
 * The receipts published for one order, read as an async iterator, the shape
 * a PubSub hands a subscription resolver. `end()` completes it; a subscriber
 * that leaves calls `return()`, which ends a pending read at once.
 */
class ReceiptChannel implements AsyncIterableIterator<{ receipts: Receipt }> {
  private readonly queued: number[] = [];
  /** A pending read, and what LockContext said when it was made. */
  private reader:
    | { readonly result: Deferred<IteratorResult<{ receipts: Receipt }>>; readonly seen?: number }
    | undefined;
  private closed = false;
  /** Resolves when the subscriber has called `return()`. */
  readonly returned = deferred<void>();

  constructor(
    private readonly token: number | undefined,
    private readonly tokenInContext: number | undefined,
  ) {}

  publish(n: number): void {
    const reader = this.reader;
    if (!reader) return void this.queued.push(n);
    this.reader = undefined;
    reader.result.resolve({ done: false, value: this.receipt(n, reader.seen) });
  }

  end(): void {
    this.closed = true;
    this.reader?.result.resolve({ done: true, value: undefined });
    this.reader = undefined;
  }

  next(): Promise<IteratorResult<{ receipts: Receipt }>> {
    // Read in the call, not when the value is published: the locked resolver's frame is
    // around the subscriber's read, not around the publisher.
    const seen = LockContext.token;
    const n = this.queued.shift();
    if (n !== undefined) return Promise.resolve({ done: false, value: this.receipt(n, seen) });
    if (this.closed) return Promise.resolve({ done: true, value: undefined });
    this.reader = { result: deferred(), seen };
    return this.reader.result.promise;
  }

  return(): Promise<IteratorResult<{ receipts: Receipt }>> {
    this.end();
    this.returned.resolve();
    return Promise.resolve({ done: true, value: undefined });
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  private receipt(n: number, seen: number | undefined): { receipts: Receipt } {
    return {
      receipts: {
        n,
        token: this.token ?? null,
        tokenSeenByFeed: seen ?? null,
        tokenInContext: this.tokenInContext ?? null,
      },
    };
  }
}

@Injectable()
class ReceiptFeed {
  private readonly channels = new Map<string, Deferred<ReceiptChannel>>();

  private entry(id: string): Deferred<ReceiptChannel> {
    let entry = this.channels.get(id);
    if (!entry) this.channels.set(id, (entry = deferred()));
    return entry;
  }

  open(id: string, token: number | undefined, tokenInContext: number | undefined): ReceiptChannel {
    const channel = new ReceiptChannel(token, tokenInContext);
    this.entry(id).resolve(channel);
    return channel;
  }

  /** The channel of `id`, once a subscriber has opened it. */
  opened(id: string): Promise<ReceiptChannel> {
    return this.entry(id).promise;
  }
}

@Resolver()
class PaymentsResolver {
  constructor(
    private readonly ledger: Ledger,
    private readonly feed: ReceiptFeed,
  ) {}

  @Query()
  @Locked('order:<0>', { wait: false })
  async payment(
    @Args('id') id: string,
    @Context() context: object,
    @FencingToken() token?: number,
  ) {
    return this.answer(id, context, token);
  }

  // @Locked above the GraphQL decorator this time: it decorates the wrapper.
  @Locked('order:<0>', { wait: false })
  @Mutation()
  async pay(
    @Args('id') id: string | undefined,
    @Args('gate') gate: string | undefined,
    @Context() context: object,
    @FencingToken() token?: number,
  ) {
    if (gate) await latches.enter(gate);
    return this.answer(id!, context, token);
  }

  @Mutation()
  @Locked('order:<0>', { wait: 300 })
  async queue(@Args('id') id: string, @Context() context: object, @FencingToken() token?: number) {
    return this.answer(id, context, token);
  }

  @Mutation()
  @Locked('order:<0>', { wait: false, ttl: 1000 })
  async payFast(
    @Args('id') id: string,
    @Context() context: object,
    @FencingToken() token?: number,
  ) {
    return this.answer(id, context, token);
  }

  @Mutation()
  @Locked('order:<0>', { wait: false })
  refund(@Args('id') id: string): never {
    throw new Error(`order ${id} cannot be refunded`);
  }

  /** Stops as soon as the lock is lost, as work under a lock should: by rethrowing the reason. */
  @Mutation()
  @Locked('order:<0>', { ttl: 200 })
  async settle(
    @Args('id') _id: string,
    @Args('gate') gate: string,
    @LockSignal() signal?: AbortSignal,
  ) {
    await latches.enter(gate);
    signal!.throwIfAborted();
    return true;
  }

  @Subscription()
  @Locked('feed:<0>', { wait: false })
  receipts(@Args('id') id: string, @Context() context: object, @FencingToken() token?: number) {
    return this.feed.open(id, token, getRequestLocks(context)?.token);
  }

  private answer(id: string, context: object, token: number | undefined): Payment {
    return {
      id,
      token: token ?? null,
      tokenSeenByService: this.ledger.tokenSeenByService() ?? null,
      tokensOfOperation: getRequestLocks(context)?.locks.map((lock) => lock.token!) ?? null,
    };
  }
}

function appModule(graphql: DynamicModule): Type {
  @Module({
    imports: [
      RedisLockModule.forRootAsync({
        useFactory: () => ({ nodes: redis.nodes.map((n) => n.url), logger: quietLogger() }),
      }),
      graphql,
    ],
    providers: [PaymentsResolver, Ledger, ReceiptFeed],
  })
  class GraphQLAppModule {}
  return GraphQLAppModule;
}

const drivers = [
  [
    'Apollo on Express',
    () =>
      NestFactory.create(
        appModule(
          GraphQLModule.forRoot<ApolloDriverConfig>({
            driver: ApolloDriver,
            typeDefs,
            graphiql: false,
            includeStacktraceInErrorResponses: false,
            subscriptions: { 'graphql-ws': true },
          }),
        ),
        new ExpressAdapter(),
        { logger: false },
      ),
  ],
  [
    'Mercurius on Fastify',
    () =>
      NestFactory.create(
        appModule(
          GraphQLModule.forRoot<MercuriusDriverConfig>({
            driver: MercuriusDriver,
            typeDefs,
            graphiql: false,
            subscription: true,
          }),
        ),
        new FastifyAdapter(),
        { logger: false },
      ),
  ],
] as const;

describe.each(drivers)('@Locked on GraphQL resolvers (%s)', (driver, createApp) => {
  let app: INestApplication;
  let url: string;
  let locks: LockService;
  let feed: ReceiptFeed;
  let admin: Redis[];
  let subscriptions: Client;
  // Keys of their own per driver: both apps lock on the same nodes.
  const prefix = driver.startsWith('Apollo') ? 'a' : 'm';
  const id = (n: number) => `${prefix}${n}`;

  beforeAll(async () => {
    app = await createApp();
    await app.listen(0, '127.0.0.1');
    url = `${(await app.getUrl()).replace('[::1]', '127.0.0.1')}/graphql`;
    locks = app.get(LockService);
    feed = app.get(ReceiptFeed);
    admin = redis.nodes.map((n) => new Redis(n.url));
    subscriptions = subscriptionClient(url.replace(/^http/, 'ws'));
  });
  afterAll(async () => {
    await subscriptions?.dispose();
    await app?.close();
    await Promise.all((admin ?? []).map((c) => c.quit()));
  });
  afterEach(() => latches.reset());

  const PAYMENT = 'id token tokenSeenByService tokensOfOperation';
  const pay = (orderId: string | undefined, gate?: string) =>
    postGraphQL<{ pay: Payment | null }>(
      url,
      `mutation ($id: ID, $gate: String) { pay(id: $id, gate: $gate) { ${PAYMENT} } }`,
      { id: orderId, gate },
    );
  const mutate = <K extends string>(field: K, orderId: string) =>
    postGraphQL<Record<K, Payment | boolean | null>>(
      url,
      `mutation ($id: ID!) { ${field}(id: $id)${field === 'refund' ? '' : ` { ${PAYMENT} }`} }`,
      { id: orderId },
    );

  /** The one error of a response whose locked field failed. */
  function onlyError<T>(response: GraphQLResponse<T>): GraphQLFormattedError {
    expect(response.errors).toHaveLength(1);
    return response.errors![0];
  }

  it('answers the second of two concurrent mutations for one order with LOCK_BUSY and retryAfter in seconds', async () => {
    const first = pay(id(1), 'busy');
    await latches.entered('busy');
    const second = await pay(id(1));
    expect(second.data?.pay ?? null).toBeNull();
    const error = onlyError(second);
    expect(error.path).toEqual(['pay']);
    expect(error.extensions).toMatchObject({ code: 'LOCK_BUSY' });
    // Whole seconds, as in an HTTP Retry-After header, where the HTTP body counts ms.
    expect(error.extensions!.retryAfter).toEqual(expect.any(Number));
    expect(Number.isInteger(error.extensions!.retryAfter)).toBe(true);
    expect(error.extensions!.retryAfter).toBeGreaterThanOrEqual(1);
    expect(error.message).toMatch(
      /^Busy: another request holds the lock on this resource. Retry in \d+ s.$/,
    );
    latches.open('busy');
    expect((await first).data?.pay).toMatchObject({ id: id(1), token: expect.any(Number) });
  });

  it('answers LOCK_TIMEOUT when the order stays locked for longer than the resolver waits', async () => {
    const first = pay(id(2), 'slow');
    await latches.entered('slow');
    const waited = await mutate('queue', id(2));
    const error = onlyError(waited);
    expect(error.extensions).toMatchObject({ code: 'LOCK_TIMEOUT' });
    expect(error.extensions!.retryAfter).toBeGreaterThanOrEqual(1);
    expect(error.message).toMatch(/^Busy: another request kept this resource locked/);
    latches.open('slow');
    expect((await first).errors).toBeUndefined();
  });

  it('gives the fencing token to the resolver, to a service it calls, and to the operation context', async () => {
    const first = await postGraphQL<{ payment: Payment }>(
      url,
      `query ($id: ID!) { payment(id: $id) { ${PAYMENT} } }`,
      { id: id(3) },
    );
    expect(first.errors).toBeUndefined();
    const { token, tokenSeenByService, tokensOfOperation } = first.data!.payment;
    expect(token).toEqual(expect.any(Number));
    expect(tokenSeenByService).toBe(token);
    // getRequestLocks() reads the GraphQL context, not the parent object of the field.
    expect(tokensOfOperation).toEqual([token]);
    const second = await postGraphQL<{ payment: Payment }>(
      url,
      `query ($id: ID!) { payment(id: $id) { token } }`,
      { id: id(3) },
    );
    expect(second.data!.payment.token).toBeGreaterThan(token!);
  });

  it('lists the locks of every root field of one operation in its context, in the order granted', async () => {
    // Mutation fields run one after the other, so the second sees both grants.
    const response = await postGraphQL<{ a: Payment; b: Payment }>(
      url,
      `mutation ($a: ID!, $b: ID!) { a: pay(id: $a) { ${PAYMENT} } b: pay(id: $b) { ${PAYMENT} } }`,
      { a: id(4), b: id(5) },
    );
    expect(response.errors).toBeUndefined();
    const { a, b } = response.data!;
    expect(a.tokensOfOperation).toEqual([a.token]);
    expect(b.tokensOfOperation).toEqual([a.token, b.token]);
  });

  it('answers a missing key argument with LOCK_INVALID_KEY, naming no template', async () => {
    const error = onlyError(await pay(undefined));
    expect(error.extensions).toMatchObject({ code: 'LOCK_INVALID_KEY' });
    expect(error.extensions!.retryAfter).toBeUndefined();
    expect(error.message).not.toContain('PaymentsResolver');
    expect(error.message).not.toContain('order:');
  });

  it("passes the resolver's own error through untouched, and releases the lock", async () => {
    const released = nextLockEvent(locks, 'released', `order:${id(6)}`);
    const error = onlyError(await mutate('refund', id(6)));
    expect(error.message).toBe(`order ${id(6)} cannot be refunded`);
    expect(String(error.extensions?.code ?? '')).not.toMatch(/^LOCK_/);
    await released;
    await (await locks.tryAcquire(`order:${id(6)}`)).release();
  });

  it('answers LOCK_LOST when the resolver stops because its lock was lost', async () => {
    const lost = nextLockEvent(locks, 'lost', `order:${id(7)}`);
    const settled = postGraphQL<{ settle: boolean | null }>(
      url,
      'mutation ($id: ID!) { settle(id: $id, gate: "lost") }',
      { id: id(7) },
    );
    await latches.entered('lost');
    // Another program takes the keys over: the next extension finds them gone.
    await Promise.all(admin.map((c) => c.set(`lock:{order:${id(7)}}`, 'intruder', 'PX', 5000)));
    await lost;
    latches.open('lost');
    const error = onlyError(await settled);
    expect(error.extensions).toMatchObject({ code: 'LOCK_LOST' });
    expect(error.message).toBe(
      'The lock on this resource was lost before the operation finished; its work may be incomplete.',
    );
    await Promise.all(admin.map((c) => c.del(`lock:{order:${id(7)}}`)));
  });

  it('answers LOCK_UNAVAILABLE, not LOCK_BUSY, when a majority of nodes does not answer', async () => {
    await Promise.all([redis.nodes[0].pause(), redis.nodes[1].pause()]);
    try {
      const error = onlyError(await mutate('payFast', id(8)));
      expect(error.extensions).toMatchObject({ code: 'LOCK_UNAVAILABLE' });
      expect(error.extensions!.retryAfter).toBeUndefined();
      // What happened, without the nodes' addresses.
      expect(error.message).toBe('The lock service is unavailable; try again later.');
    } finally {
      await Promise.all([redis.nodes[0].resume(), redis.nodes[1].resume()]);
    }
    expect((await mutate('payFast', id(8))).errors).toBeUndefined();
  });

  /** Subscribes to the receipts of `orderId`, and reads the first one once the resolver has run. */
  async function receiptsOf(orderId: string) {
    const subscription = new ClientSubscription<{ receipts: Receipt }>(
      subscriptions,
      'subscription ($id: ID!) { receipts(id: $id) { n token tokenSeenByFeed tokenInContext } }',
      { id: orderId },
    );
    const reading = subscription.next();
    const channel = await feed.opened(orderId);
    channel.publish(1);
    const first = (await reading)!.receipts;
    expect(first.n).toBe(1);
    return { subscription, channel, first };
  }

  it('holds the lock while a subscription lasts, refuses a second one with LOCK_BUSY, and releases before it completes', async () => {
    const { subscription, channel, first } = await receiptsOf(id(9));
    expect(first.token).toEqual(expect.any(Number));
    // The iterator's reads run in the lock's frame: LockContext works there.
    expect(first.tokenSeenByFeed).toBe(first.token);
    // Both drivers give subscriptions a context of their own, which carries the locks.
    expect(first.tokenInContext).toBe(first.token);

    await expect(locks.tryAcquire(`feed:${id(9)}`)).rejects.toMatchObject({ code: 'LOCK_BUSY' });
    const refused = await new ClientSubscription(
      subscriptions,
      'subscription ($id: ID!) { receipts(id: $id) { n } }',
      { id: id(9) },
    )
      .next()
      .catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(SubscriptionRefused);
    const error = (refused as SubscriptionRefused).errors[0];
    expect(error.extensions).toMatchObject({ code: 'LOCK_BUSY' });
    expect(error.extensions!.retryAfter).toBeGreaterThanOrEqual(1);

    channel.publish(2);
    expect((await subscription.next())!.receipts).toMatchObject({ n: 2, token: first.token });
    channel.end();
    expect(await subscription.next()).toBeUndefined();
    // The completion reached the client after the release: the lock is free already.
    await (await locks.tryAcquire(`feed:${id(9)}`)).release();
  });

  it('ends a subscription whose lock is lost, its pending read included, and returns its source', async () => {
    const { subscription, channel } = await receiptsOf(id(11));
    const reading = subscription.next().then(
      (data) => ({ data }),
      (error: unknown) => ({ error }),
    );
    const lost = nextLockEvent(locks, 'lost', `feed:${id(11)}`);
    // Released from outside (the CLI's release does this): the next extension finds it gone.
    await locks.forceRelease(`feed:${id(11)}`);
    await lost;
    await channel.returned.promise;
    channel.publish(2);
    // The client hears the end (an error or a completion, as the driver sends it), not receipt 2.
    expect(await reading).not.toHaveProperty('data.receipts');
  });

  it('releases the lock of a subscription when the client unsubscribes', async () => {
    const { subscription, channel } = await receiptsOf(id(10));
    await expect(locks.tryAcquire(`feed:${id(10)}`)).rejects.toMatchObject({ code: 'LOCK_BUSY' });
    const released = nextLockEvent(locks, 'released', `feed:${id(10)}`);
    await subscription.stop();
    await channel.returned.promise;
    await released;
    await (await locks.tryAcquire(`feed:${id(10)}`)).release();
  });
});
