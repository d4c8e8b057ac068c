/**
 * One application instance in its own OS process, for
 * scheduling-processes.spec.ts: the harness can shift its wall clock (the
 * chaos suite's clock shim), pause it (SIGSTOP), kill it, or close it.
 *
 * ```sh
 * node --import tsx test/scheduling/scheduling-app.ts --id a1 --mode cron --hold 900 \
 *   --nodes redis://127.0.0.1:7001,... --store redis://127.0.0.1:7100 --clock-origin 123456789
 * ```
 *
 * `--mode cron`: two jobs every second (`@Cron('* * * * * *')`) whose body
 * takes 50 ms, locked per tick: `held` with `holdAtLeast: --hold`, `unheld`
 * without (the negative control, in the same processes on the same clocks);
 * each run writes its tick to a fenced store. `--mode leader`: a leader election
 * (`--ttl` lease) whose leader keeps writing to a fenced hash with its epoch.
 *
 * Protocol: one JSON object per line on stdout (AppMessage); `close` on stdin
 * closes the application (its shutdown hooks run) and exits. Nest's own log
 * goes to stderr.
 */
import 'reflect-metadata';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { Inject, Injectable, Module, type LoggerService } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Cron, ScheduleModule } from '@nestjs/schedule';
import { Redis } from 'ioredis';
import { redisFence } from '../../lib/fenced/index.js';
import {
  CurrentLock,
  LeaderService,
  Locked,
  LockService,
  RedisLockModule,
  type Lock,
  type LeaderTerm,
} from '../../lib/index.js';
import { now, setClockOrigin } from '../chaos/history.js';
import { RedisFencedStore } from '../chaos/stores.js';

/** What an instance reports; `at` is on the harness's monotonic time line (ms). */
export type AppMessage =
  | { type: 'ready'; id: string; at: number; wall: number }
  | {
      type: 'run';
      id: string;
      job: string;
      tick: number;
      token: number;
      /** When the body began, right after the grant. */
      started: number;
      at: number;
    }
  | { type: 'skipped'; id: string; job: string; tick: number; at: number }
  | { type: 'elected'; id: string; epoch: number; at: number }
  | { type: 'retired'; id: string; epoch: number; reason: string; at: number }
  | { type: 'work'; id: string; epoch: number; seq: number | undefined; at: number }
  | { type: 'closing'; id: string; at: number }
  | { type: 'closed'; id: string; at: number };

const { values } = parseArgs({
  options: {
    id: { type: 'string' },
    mode: { type: 'string' },
    nodes: { type: 'string' },
    store: { type: 'string' },
    hold: { type: 'string', default: '900' },
    ttl: { type: 'string', default: '1000' },
    'clock-origin': { type: 'string' },
  },
});
if (!values.id || !values.nodes || !values.store || !values.mode) {
  throw new Error(
    'usage: scheduling-app.ts --id a1 --mode cron|leader --nodes url,... --store url',
  );
}
if (values['clock-origin']) setClockOrigin(BigInt(values['clock-origin']));
const ID = values.id;
const HOLD = Number(values.hold);
const TTL = Number(values.ttl);
/** How long a job's body takes. */
const BODY_MS = 50;
/** How often a leader does a unit of work. */
const WORK_EVERY_MS = 25;

function send(message: AppMessage): void {
  // Synchronous on a pipe: a line written before a SIGKILL is not lost.
  process.stdout.write(`${JSON.stringify(message)}\n`);
}

/** Nest's log on stderr: stdout carries the protocol. */
class StderrLogger implements LoggerService {
  log() {}
  debug() {}
  verbose() {}
  warn(message: unknown) {
    process.stderr.write(`[${ID} warn] ${String(message)}\n`);
  }
  error(message: unknown) {
    process.stderr.write(`[${ID} error] ${String(message)}\n`);
  }
  fatal(message: unknown) {
    this.error(message);
  }
}

const store = new Redis(values.store, { maxRetriesPerRequest: 1 });
const tickOf = (lock: Lock) => Number(lock.resources[0]!.split(':').pop());

@Injectable()
class TickJob {
  private readonly records = new RedisFencedStore(store);

  @Cron('* * * * * *')
  @Locked('held:<tick>', { holdAtLeast: HOLD })
  async held(@CurrentLock() lock?: Lock) {
    await this.run('held', lock!);
  }

  @Cron('* * * * * *')
  @Locked('unheld:<tick>')
  async unheld(@CurrentLock() lock?: Lock) {
    await this.run('unheld', lock!);
  }

  private async run(job: string, lock: Lock): Promise<void> {
    const started = now();
    const tick = tickOf(lock);
    // Each run is written with its token, so the store counts the runs of a tick on its own;
    // written before it is reported, so that every reported run is in the store.
    await this.records.write(`${job}:${tick}`, lock.token!, ID);
    send({ type: 'run', id: ID, job, tick, token: lock.token!, started, at: now() });
    await sleep(BODY_MS);
  }
}

@Injectable()
class Leader {
  private readonly fence = redisFence(store);

  constructor(@Inject(LeaderService) private readonly leaders: LeaderService) {}

  start(): void {
    this.leaders.lead('scheduling-leader', {
      ttl: TTL,
      onElected: (term) => {
        send({ type: 'elected', id: ID, epoch: term.epoch, at: now() });
        void this.work(term);
      },
      onRetired: (term, reason) =>
        send({ type: 'retired', id: ID, epoch: term.epoch, reason, at: now() }),
    });
  }

  /** The leader's work: one fenced write after another, for as long as its term lasts. */
  private async work(term: LeaderTerm): Promise<void> {
    while (!term.signal.aborted) {
      let seq: number | undefined;
      try {
        const fields = await this.fence.update('leader-work', term.epoch, (f) => ({
          seq: Number(f.seq ?? 0) + 1,
          by: ID,
        }));
        seq = Number(fields.seq);
      } catch {
        // Refused by the fence: a newer leader has written.
      }
      send({ type: 'work', id: ID, epoch: term.epoch, seq, at: now() });
      await sleep(WORK_EVERY_MS);
    }
  }
}

const lockModule = RedisLockModule.forRoot({
  nodes: values.nodes.split(','),
  ttl: TTL,
  checkNodes: false,
});

@Module({ imports: [ScheduleModule.forRoot(), lockModule], providers: [TickJob] })
class CronApp {}

@Module({ imports: [lockModule], providers: [LeaderService, Leader] })
class LeaderApp {}

const app = await NestFactory.createApplicationContext(
  values.mode === 'cron' ? CronApp : LeaderApp,
  { logger: new StderrLogger() },
);
const locks = app.get(LockService);
locks.on('skipped', ({ resources, tick }) =>
  send({ type: 'skipped', id: ID, job: resources[0]!.split(':')[0]!, tick: tick!, at: now() }),
);
if (values.mode === 'leader') app.get(Leader).start();
send({ type: 'ready', id: ID, at: now(), wall: Date.now() });

createInterface({ input: process.stdin }).on('line', (line) => {
  if (line.trim() !== 'close') return;
  send({ type: 'closing', id: ID, at: now() });
  void app.close().then(() => {
    send({ type: 'closed', id: ID, at: now() });
    store.disconnect();
    process.exit(0);
  });
});
