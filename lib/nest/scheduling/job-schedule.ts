import { LockKeyError } from '../locked/locked.errors.js';
import { cronTick, type CronOptions } from './cron-tick.js';

// The metadata keys of @nestjs/schedule (stable since its first releases): read by name, so
// that the package stays an optional peer, never imported.
const SCHEDULER_TYPE = 'SCHEDULER_TYPE';
const SCHEDULER_NAME = 'SCHEDULER_NAME';
const CRON_OPTIONS = 'SCHEDULE_CRON_OPTIONS';
const INTERVAL_OPTIONS = 'SCHEDULE_INTERVAL_OPTIONS';
const CRON = 1;
const TIMEOUT = 2;
const INTERVAL = 3;

/** How @nestjs/schedule runs a method, as far as its lock is concerned. */
export interface JobSchedule {
  readonly kind: 'cron' | 'interval' | 'timeout';
  /** The job's name for events and metrics. */
  readonly job: string;
  /** The tick a run at `now` (epoch ms) belongs to; undefined for a @Timeout(), which has none. */
  readonly tickAt: ((now: number) => number) | undefined;
}

/**
 * The schedule `method` (the decorated function, which carries the metadata
 * whichever decorator came first) runs on, or undefined when none.
 */
export function readSchedule(method: object, where: string): JobSchedule | undefined {
  const type = Reflect.getMetadata(SCHEDULER_TYPE, method) as number | undefined;
  if (type === undefined) return undefined;
  const name = Reflect.getMetadata(SCHEDULER_NAME, method) as unknown;
  const job = typeof name === 'string' && name.length > 0 ? name : where;
  if (type === INTERVAL) {
    const { timeout } = (Reflect.getMetadata(INTERVAL_OPTIONS, method) ?? {}) as {
      timeout?: number;
    };
    return { kind: 'interval', job, tickAt: periodTick(timeout) };
  }
  if (type === TIMEOUT) {
    // A @Timeout() fires once per process, at a different time on each instance: no shared tick.
    return { kind: 'timeout', job, tickAt: undefined };
  }
  if (type === CRON) {
    const options = (Reflect.getMetadata(CRON_OPTIONS, method) ?? {}) as CronOptions;
    let tickAt: ((now: number) => number) | undefined;
    return {
      kind: 'cron',
      job,
      // The cron expression is parsed on the first run that needs it.
      get tickAt() {
        tickAt ??= cronTick(options, where);
        return tickAt;
      },
    };
  }
  return undefined;
}

/** A fixed period's tick: the start of the wall-clock window of that length (epoch ms). */
export function periodTick(period: number | undefined): ((now: number) => number) | undefined {
  if (typeof period !== 'number' || !Number.isFinite(period) || period < 1) return undefined;
  return (now) => Math.floor(now / period) * period;
}

/** Why `<tick>` cannot be filled in for a method, as the error says it. */
export function noTickError(where: string, schedule: JobSchedule | undefined): LockKeyError {
  const fix =
    "or give the period in the options ({ tick: 60_000 }: <tick> is then the start of the call's minute).";
  return new LockKeyError(
    schedule?.kind === 'timeout'
      ? `@Locked() on ${where}: a @Timeout() fires once per process, at a different time on each ` +
          'instance, so it has no tick that the instances share. Lock a fixed key with holdAtLeast ' +
          `(e.g. @Locked('warm-up', { holdAtLeast: 60_000 })), ${fix}`
      : `@Locked() on ${where}: <tick> is the fire time of a scheduled job, but ${where} has no ` +
          `@Cron() or @Interval() from @nestjs/schedule. Add one, ${fix}`,
  );
}
