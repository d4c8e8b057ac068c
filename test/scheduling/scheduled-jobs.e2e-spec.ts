/**
 * @Locked() on @nestjs/schedule jobs, in one process: two applications on the
 * same three redis-server nodes stand for two instances. Each of @Cron(),
 * @Interval() and @Timeout() is written above and below @Locked(). The
 * clock-shifted, multi-process runs are in scheduling-processes.spec.ts.
 */
import 'reflect-metadata';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Inject, Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Cron, Interval, ScheduleModule, Timeout } from '@nestjs/schedule';
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import { Observable } from 'rxjs';
import {
  CurrentLock,
  Lock,
  LockBusyError,
  LockKeyError,
  LockOptionsError,
  Locked,
  LockService,
  RedisLockModule,
  type SkippedRun,
} from '../../lib/index.js';
import { instrumentLocks, type LockTelemetry } from '../../lib/telemetry/index.js';
import { deferred } from '../support/latch.js';
import { LogCapture } from '../support/log-capture.js';
import { nextLockEvent } from '../support/lock-events.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';

const redis = useRedisNodes(3);
const APP = 'APP_ID';

/** One run of a job: which job, in which application, on which resource. */
interface Run {
  readonly job: string;
  readonly app: string;
  readonly resource: string;
}

const runs: Run[] = [];
const watchers: (() => void)[] = [];

function record(job: string, app: string, lock: Lock | undefined): void {
  runs.push({ job, app, resource: lock?.resources[0] ?? '(no lock)' });
  for (const watch of watchers) watch();
}

/** Resolves once `done()` holds after a run. */
function until(done: () => boolean): Promise<void> {
  if (done()) return Promise.resolve();
  const reached = deferred<void>();
  watchers.push(() => done() && reached.resolve());
  return reached.promise;
}

const runsOf = (job: string) => runs.filter((r) => r.job === job);

/** How many runs each resource (each tick) had, for one job. */
function perResource(job: string): Map<string, number> {
  const counts = new Map<string, number>();
  for (const run of runsOf(job)) counts.set(run.resource, (counts.get(run.resource) ?? 0) + 1);
  return counts;
}

@Injectable()
class Jobs {
  constructor(@Inject(APP) private readonly app: string) {}

  @Cron('* * * * * *', { name: 'cron-above' })
  @Locked('cron-above:<tick>', { holdAtLeast: 500 })
  async cronAbove(@CurrentLock() lock?: Lock) {
    record('cron-above', this.app, lock);
  }

  @Locked('cron-below:<tick>', { holdAtLeast: 500 })
  @Cron('* * * * * *')
  async cronBelow(@CurrentLock() lock?: Lock) {
    record('cron-below', this.app, lock);
  }

  // An interval's tick is its period's window, and the instances' timers keep their own phases
  // within it: only a hold of a whole period covers the rest of the window whatever the phases.
  @Interval('interval-above', 300)
  @Locked('interval-above:<tick>', { holdAtLeast: 300 })
  async intervalAbove(@CurrentLock() lock?: Lock) {
    record('interval-above', this.app, lock);
  }

  @Locked('interval-below:<tick>', { holdAtLeast: 300 })
  @Interval(300)
  async intervalBelow(@CurrentLock() lock?: Lock) {
    record('interval-below', this.app, lock);
  }

  @Timeout('warm-up-above', 30)
  @Locked('warm-up-above', { holdAtLeast: 10_000 })
  async warmUpAbove(@CurrentLock() lock?: Lock) {
    record('warm-up-above', this.app, lock);
  }

  @Locked('warm-up-below', { holdAtLeast: 10_000 })
  @Timeout(30)
  async warmUpBelow(@CurrentLock() lock?: Lock) {
    record('warm-up-below', this.app, lock);
  }

  /** Scheduled far beyond the test: called by hand, to see what <tick> says of a @Timeout(). */
  @Timeout(3_600_000)
  @Locked('timeout-tick:<tick>')
  async timeoutWithTick() {}

  @Locked('unscheduled:<tick>')
  async unscheduled() {}

  @Locked('sync:<tick>', { tick: 60_000 })
  async everyMinute(@CurrentLock() lock?: Lock) {
    return lock?.resources[0];
  }

  @Locked('hold:<0>', { holdAtLeast: 400, wait: false })
  async held(id: string, @CurrentLock() lock?: Lock) {
    return `${id} ran with token ${lock?.token}`;
  }
}

const logs = new LogCapture();

async function startApp(id: string): Promise<INestApplicationContext> {
  @Module({
    imports: [
      ScheduleModule.forRoot(),
      RedisLockModule.forRoot({
        nodes: redis.nodes.map((n) => n.url),
        checkNodes: false,
        logging: 'debug',
      }),
    ],
    providers: [Jobs, { provide: APP, useValue: id }],
  })
  class AppModule {}
  return NestFactory.createApplicationContext(AppModule, { logger: logs });
}

describe('@Locked() on @nestjs/schedule jobs, written above or below the schedule', () => {
  let first: INestApplicationContext;
  let second: INestApplicationContext;
  const skipped: SkippedRun[] = [];
  const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
  const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000 });
  const meterProvider = new MeterProvider({ readers: [reader] });
  const telemetry: LockTelemetry[] = [];

  beforeAll(async () => {
    // Both before their schedules start: the first ticks count too.
    first = await startApp('first');
    second = await startApp('second');
    for (const app of [first, second]) {
      const locks = app.get(LockService);
      locks.on('skipped', (event) => void skipped.push(event));
      telemetry.push(instrumentLocks(locks, { tracer: false, meter: meterProvider.getMeter('t') }));
    }
  });
  afterAll(async () => {
    for (const t of telemetry) t.stop();
    await Promise.all([first?.close(), second?.close()]);
    await meterProvider.shutdown();
  });

  it('runs each tick once across the instances, and tells of the skipped runs', async () => {
    await until(
      () =>
        perResource('cron-above').size >= 2 &&
        perResource('cron-below').size >= 2 &&
        runsOf('interval-above').length >= 5 &&
        runsOf('interval-below').length >= 5 &&
        runsOf('warm-up-above').length >= 1 &&
        runsOf('warm-up-below').length >= 1 &&
        // Under load one instance's timer can fire too late to find a tick held: wait for a
        // tick that both fired close enough together for one of them to skip it.
        skipped.some((s) => s.job === 'cron-above'),
    );
    for (const job of ['cron-above', 'cron-below', 'interval-above', 'interval-below']) {
      const counts = perResource(job);
      expect([...counts.values()].every((n) => n === 1)).toBe(true);
      for (const resource of counts.keys()) expect(resource).toMatch(/^[\w-]+:\d{13}$/);
    }
    // A cron tick is a fire time: a whole second here.
    for (const run of runsOf('cron-above'))
      expect(Number(run.resource.split(':')[1]) % 1000).toBe(0);
    expect(runsOf('warm-up-above')).toHaveLength(1);
    expect(runsOf('warm-up-below')).toHaveLength(1);

    // Both instances fire a cron tick within milliseconds of each other: one runs it, the other
    // finds it held and skips it, every time.
    const cronSkips = skipped.filter((s) => s.job === 'cron-above');
    expect(cronSkips.length).toBeGreaterThanOrEqual(1);
    const ranTicks = new Set(runsOf('cron-above').map((r) => Number(r.resource.split(':')[1])));
    for (const skip of cronSkips) {
      expect(skip.resources).toEqual([`cron-above:${skip.tick}`]);
      if (ranTicks.has(skip.tick!)) expect(skip.retryAfter).toBeGreaterThan(0);
    }
    // Without a name in @Cron(), the job is named after its method.
    expect(skipped.some((s) => s.job === 'Jobs.cronBelow')).toBe(true);
    expect(skipped.filter((s) => s.job === 'warm-up-above')).toHaveLength(1);
    expect(skipped.filter((s) => s.job === 'Jobs.warmUpBelow')).toHaveLength(1);

    // The debug line, and nothing reported as an error: a skipped run is not a failure.
    const debug = logs.of('RedisLock', 'debug').map((l) => l.message);
    expect(debug).toContainEqual(
      expect.stringMatching(
        /^Skipped a run of cron-above: 'cron-above:\d+' is held by another instance, which runs or ran the tick of \d{4}-\d\d-\d\dT/,
      ),
    );
    expect(logs.lines.filter((l) => l.level === 'error')).toEqual([]);

    // The counter, one series per job. The cron jobs keep ticking meanwhile: the counter holds
    // every skip told before the flush, and none that was not told by the time it is read.
    const cronSkipsBefore = skipped.filter((s) => s.job === 'cron-above').length;
    await reader.forceFlush();
    const metric = exporter
      .getMetrics()
      .at(-1)
      ?.scopeMetrics.flatMap((s) => s.metrics)
      .find((m) => m.descriptor.name === 'lock.skipped');
    const byJob = new Map(
      (metric?.dataPoints ?? []).map((p) => [p.attributes['lock.job'], p.value as number]),
    );
    expect(byJob.get('cron-above')).toBeGreaterThanOrEqual(cronSkipsBefore);
    expect(byJob.get('cron-above')).toBeLessThanOrEqual(
      skipped.filter((s) => s.job === 'cron-above').length,
    );
    expect(byJob.get('warm-up-above')).toBe(1);
  });

  it('holdAtLeast keeps the lock after the method returned, on the nodes too, then releases it', async () => {
    const jobs = first.get(Jobs);
    const locks = first.get(LockService);
    const started = performance.now();
    const released = nextLockEvent(locks, 'released', 'hold:a').then(
      () => performance.now() - started,
    );
    expect(await jobs.held('a')).toMatch(/^a ran with token \d+$/);

    const inspection = await locks.inspect('hold:a');
    expect(inspection.held).toBe(true);
    // The lease now ends with the hold, not with the 5 s ttl: a crash here would keep the hold.
    expect(inspection.ttl).toBeLessThanOrEqual(420);
    await expect(second.get(Jobs).held('a')).rejects.toBeInstanceOf(LockBusyError);

    expect(await released).toBeGreaterThanOrEqual(400);
    expect((await locks.inspect('hold:a')).held).toBe(false);
    expect(await second.get(Jobs).held('a')).toMatch(/^a ran/);
  });

  it('does not report a held tick lost when its hold ends, even when the release comes late', async () => {
    const locks = first.get(LockService);
    const lost: string[] = [];
    const onLost = ({ lock }: { lock: Lock }) => void lost.push(lock.resources[0]);
    locks.on('lost', onLost);
    try {
      const started = performance.now();
      const released = nextLockEvent(locks, 'released', 'hold:late');
      await first.get(Jobs).held('late');
      // The event loop stalls across the end of the hold (400 ms), so the timer that releases the
      // lock fires after the lease it set has run out, as a busy machine makes it do.
      await new Promise((resolve) =>
        setTimeout(resolve, Math.max(0, 380 - (performance.now() - started))),
      );
      const until = performance.now() + 60;
      while (performance.now() < until);
      await released;
      expect(lost).toEqual([]);
      expect(logs.of('RedisLock', 'warn').filter((l) => l.text.includes("'hold:late'"))).toEqual(
        [],
      );
    } finally {
      locks.off('lost', onLost);
    }
  });

  it('fills <tick> from the tick option where no schedule is', async () => {
    const before = Math.floor(Date.now() / 60_000) * 60_000;
    const resource = await first.get(Jobs).everyMinute();
    const after = Math.floor(Date.now() / 60_000) * 60_000;
    expect([`sync:${before}`, `sync:${after}`]).toContain(resource);
  });

  it('says how to fix a <tick> that has no tick', async () => {
    const jobs = first.get(Jobs);
    await expect(jobs.unscheduled()).rejects.toThrow(
      new LockKeyError(
        '@Locked() on Jobs.unscheduled: <tick> is the fire time of a scheduled job, but Jobs.unscheduled has no ' +
          '@Cron() or @Interval() from @nestjs/schedule. Add one, or give the period in the options ' +
          "({ tick: 60_000 }: <tick> is then the start of the call's minute).",
      ),
    );
    await expect(jobs.timeoutWithTick()).rejects.toThrow(
      /a @Timeout\(\) fires once per process, at a different time on each instance, so it has no tick that the instances share\. Lock a fixed key with holdAtLeast/,
    );
  });

  it('checks the new options where they are written', async () => {
    const decorate = (options: object, returns: unknown = Promise) => {
      class Target {
        method(): unknown {
          return undefined;
        }
      }
      const descriptor = Object.getOwnPropertyDescriptor(Target.prototype, 'method')!;
      Reflect.defineMetadata('design:returntype', returns, Target.prototype, 'method');
      Locked('x', options)(Target.prototype, 'method', descriptor);
    };
    expect(() => decorate({ holdAtLeast: 0 })).toThrow(
      new LockOptionsError(
        '@Locked() on Target.method: holdAtLeast must be a whole number of milliseconds from 1 to 2147483647 (got 0).',
      ),
    );
    expect(() => decorate({ tick: 1.5 })).toThrow(/tick must be a whole number of milliseconds/);
    expect(() => decorate({ holdAtLeast: 100 }, Observable)).toThrow(
      /holdAtLeast applies to methods that return a value or a Promise, and this one returns an Observable\. Return a Promise \(e\.g\. lastValueFrom\(stream\)\)/,
    );
    // A minimum hold belongs to one job, never to every @Locked() method of an application.
    @Module({
      imports: [
        RedisLockModule.forRoot({
          nodes: redis.nodes.map((n) => n.url),
          locked: { holdAtLeast: 100 } as object,
        }),
      ],
    })
    class Misconfigured {}
    await expect(
      NestFactory.createApplicationContext(Misconfigured, { logger: false, abortOnError: false }),
    ).rejects.toThrow(
      "RedisLockModule locked defaults has no option 'holdAtLeast'; the options are: ttl, wait, retry, autoExtend.",
    );
  });
});
