/**
 * The queue-consumer recipe: @Locked() on a BullMQ job handler, keyed by the
 * job's data, so that two workers never process the same entity at once.
 * Two applications (two workers, four jobs at a time each) consume one queue
 * on a real redis-server; an unlocked consumer of another queue is the
 * negative control.
 */
import 'reflect-metadata';
import { beforeAll, describe, expect, it } from '@jest/globals';
import {
  Inject,
  Injectable,
  Module,
  type BeforeApplicationShutdown,
  type INestApplicationContext,
  type OnApplicationBootstrap,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Queue, Worker, type Job } from 'bullmq';
import { setTimeout as sleep } from 'node:timers/promises';
import { Locked, RedisLockModule } from '../../lib/index.js';
import { quietLogger } from '../support/quiet-logger.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';

const redis = useRedisNodes(3);
const QUEUE_OPTIONS = 'QUEUE_OPTIONS';
const ACCOUNTS = ['a', 'b', 'c', 'd'];
const JOBS_PER_ACCOUNT = 10;

interface Deposit {
  accountId: string;
  amount: number;
}

/**
 * Balances kept the way a slow store would be written: read, compute, write,
 * with time in between. Two handlers on one account at once lose a deposit.
 */
class Ledger {
  readonly balances = new Map<string, number>();
  readonly active = new Map<string, number>();
  /** The most handlers seen at once on one account. */
  mostAtOnce = 0;
  done = 0;
  private allDone: (() => void) | undefined;

  async deposit({ accountId, amount }: Deposit): Promise<void> {
    const atOnce = (this.active.get(accountId) ?? 0) + 1;
    this.active.set(accountId, atOnce);
    this.mostAtOnce = Math.max(this.mostAtOnce, atOnce);
    const balance = this.balances.get(accountId) ?? 0;
    await sleep(10);
    this.balances.set(accountId, balance + amount);
    this.active.set(accountId, atOnce - 1);
  }

  /** Resolves once `count` jobs were completed. */
  completed(count: number): Promise<void> {
    return new Promise((resolve) => {
      this.allDone = () => this.done >= count && resolve();
      this.allDone();
    });
  }

  jobDone(): void {
    this.done++;
    this.allDone?.();
  }
}

interface QueueSetup {
  readonly name: string;
  readonly ledger: Ledger;
  /** Which application each processed job ran in. */
  readonly workers: string[];
}

/** The recipe: the handler is locked on the account named in the job's data. */
@Injectable()
class DepositsConsumer implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private worker: Worker | undefined;

  constructor(@Inject(QUEUE_OPTIONS) protected readonly setup: QueueSetup & { app: string }) {}

  onApplicationBootstrap() {
    this.worker = new Worker(this.setup.name, (job: Job<Deposit>) => this.handle(job), {
      connection: { url: redis.nodes[0].url, maxRetriesPerRequest: null },
      concurrency: 4,
    });
    this.worker.on('completed', () => this.setup.ledger.jobDone());
  }

  // Waits (up to the module's waitTimeout) while another worker has the account; a job that
  // waited too long fails and BullMQ retries it per its attempts and backoff.
  @Locked('account:<0.data.accountId>')
  async handle(job: Job<Deposit>) {
    this.setup.workers.push(this.setup.app);
    await this.setup.ledger.deposit(job.data);
  }

  // Before the lock service closes in its own shutdown hook: jobs in flight finish under their lock.
  async beforeApplicationShutdown() {
    await this.worker?.close();
  }
}

/** The negative control: the same consumer without the lock. */
@Injectable()
class UnlockedConsumer extends DepositsConsumer {
  override async handle(job: Job<Deposit>) {
    this.setup.workers.push(this.setup.app);
    await this.setup.ledger.deposit(job.data);
  }
}

async function startApp(
  app: string,
  setup: QueueSetup,
  consumer: typeof DepositsConsumer,
): Promise<INestApplicationContext> {
  @Module({
    imports: [
      RedisLockModule.forRoot({
        nodes: redis.nodes.map((n) => n.url),
        checkNodes: false,
        logger: quietLogger(),
      }),
    ],
    providers: [consumer, { provide: QUEUE_OPTIONS, useValue: { ...setup, app } }],
  })
  class ConsumerModule {}
  return NestFactory.createApplicationContext(ConsumerModule, { logger: false });
}

async function runQueue(
  name: string,
  consumer: typeof DepositsConsumer,
): Promise<QueueSetup & { elapsed: number }> {
  const setup: QueueSetup = { name, ledger: new Ledger(), workers: [] };
  const apps = await Promise.all([
    startApp('first', setup, consumer),
    startApp('second', setup, consumer),
  ]);
  const queue = new Queue<Deposit>(name, { connection: { url: redis.nodes[0].url } });
  const started = performance.now();
  try {
    const total = ACCOUNTS.length * JOBS_PER_ACCOUNT;
    const completed = setup.ledger.completed(total);
    await queue.addBulk(
      Array.from({ length: total }, (_, i) => ({
        name: 'deposit',
        data: { accountId: ACCOUNTS[i % ACCOUNTS.length], amount: 1 },
        opts: { attempts: 3, backoff: { type: 'fixed', delay: 50 } },
      })),
    );
    await completed;
    return { ...setup, elapsed: performance.now() - started };
  } finally {
    await Promise.all(apps.map((app) => app.close()));
    await queue.obliterate({ force: true });
    await queue.close();
  }
}

describe('@Locked() on a queue consumer, keyed by the job data', () => {
  let locked: Awaited<ReturnType<typeof runQueue>>;
  let unlocked: Awaited<ReturnType<typeof runQueue>>;

  beforeAll(async () => {
    locked = await runQueue('deposits-locked', DepositsConsumer);
    unlocked = await runQueue('deposits-unlocked', UnlockedConsumer);
  });

  it('never processes one account in two workers at once, and loses no deposit', () => {
    expect(locked.ledger.mostAtOnce).toBe(1);
    for (const account of ACCOUNTS)
      expect(locked.ledger.balances.get(account)).toBe(JOBS_PER_ACCOUNT);
    // Both applications took jobs: the lock is what kept them apart, not a single worker.
    expect(new Set(locked.workers)).toEqual(new Set(['first', 'second']));
  });

  it('without the lock, the same consumers overlap on an account and lose deposits (the control)', () => {
    expect(unlocked.ledger.mostAtOnce).toBeGreaterThan(1);
    const total = [...unlocked.ledger.balances.values()].reduce((sum, n) => sum + n, 0);
    expect(total).toBeLessThan(ACCOUNTS.length * JOBS_PER_ACCOUNT);
  });
});
