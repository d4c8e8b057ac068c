import { createRequire } from 'node:module';
import { LockKeyError } from '../locked/locked.errors.js';

/** What @nestjs/schedule stores of a `@Cron()` job: what its tick depends on. */
export interface CronOptions {
  readonly cronTime?: unknown;
  readonly timeZone?: string;
  readonly utcOffset?: number;
}

interface LuxonDateTime {
  toMillis(): number;
}

interface CronModule {
  CronTime: new (
    source: unknown,
    timeZone?: string | null,
    utcOffset?: number | null,
  ) => { getNextDateFrom(start: LuxonDateTime): LuxonDateTime };
}

interface LuxonModule {
  DateTime: { fromMillis(ms: number, options?: { zone?: string }): LuxonDateTime };
}

let cronLibrary: { cron: CronModule; luxon: LuxonModule } | undefined;

/**
 * The `cron` package that @nestjs/schedule fires its jobs with, resolved from
 * @nestjs/schedule itself: the same parser, whatever the package manager's
 * layout, and nothing to install besides @nestjs/schedule.
 */
function loadCron(where: string): { cron: CronModule; luxon: LuxonModule } {
  if (cronLibrary) return cronLibrary;
  try {
    const schedule = createRequire(import.meta.url).resolve('@nestjs/schedule/package.json');
    const fromSchedule = createRequire(schedule);
    const cron = fromSchedule('cron') as CronModule;
    const luxon = createRequire(fromSchedule.resolve('cron'))('luxon') as LuxonModule;
    cronLibrary = { cron, luxon };
    return cronLibrary;
  } catch (error) {
    throw new LockKeyError(
      `@Locked() on ${where}: <tick> of a @Cron() job is computed with the cron parser of @nestjs/schedule, ` +
        `which could not be loaded (${(error as Error).message}). Install @nestjs/schedule.`,
    );
  }
}

/** The zone cron fires in: as CronJob computes it from the same options. */
function cronZone(options: CronOptions): string | undefined {
  const offset = options.utcOffset;
  if (typeof offset === 'number') {
    const sign = offset < 0 ? '-' : '+';
    const hours = Math.trunc(Math.abs(offset) / 60);
    const minutes = Math.abs(offset) - hours * 60;
    return `UTC${sign}${String(hours).padStart(2, '0')}:${String(minutes).padStart(2, '0')}`;
  }
  return typeof options.timeZone === 'string' ? options.timeZone : undefined;
}

/** Longest look back for the latest fire time: beyond a year, the next one is used. */
const MAX_LOOK_BACK = 400 * 24 * 3600 * 1000;

/**
 * A cron job's tick: its latest scheduled fire time not after `now`. The cron
 * library fires a job once its own clock reaches the scheduled time, so every
 * instance, however far its clock is off, computes the same tick for the same
 * firing; a run that started late still belongs to the tick it was fired for.
 */
export function cronTick(options: CronOptions, where: string): (now: number) => number {
  const { cronTime } = options;
  // A one-off job (a Date or a luxon DateTime): its one tick is that time.
  if (cronTime instanceof Date) {
    const at = cronTime.getTime();
    return () => at;
  }
  if (typeof (cronTime as LuxonDateTime | undefined)?.toMillis === 'function') {
    const at = (cronTime as LuxonDateTime).toMillis();
    return () => at;
  }
  const { cron, luxon } = loadCron(where);
  const zone = cronZone(options);
  const time = new cron.CronTime(
    cronTime,
    options.utcOffset === undefined ? (options.timeZone ?? null) : null,
    options.utcOffset ?? null,
  );
  const zoned = zone === undefined ? {} : { zone };
  /** The first fire time strictly after `ms`. */
  const nextAfter = (ms: number) =>
    time.getNextDateFrom(luxon.DateTime.fromMillis(ms, zoned)).toMillis();
  return (now) => {
    // Look back over a growing window until it holds a fire time, then walk to the latest one.
    for (let back = 1000; back <= MAX_LOOK_BACK; back *= 2) {
      let fire = nextAfter(now - back);
      if (fire > now) continue;
      for (let next = nextAfter(fire); next <= now; next = nextAfter(next)) fire = next;
      return fire;
    }
    // Called by hand before the job's first fire time in a year: the coming one.
    return nextAfter(now);
  };
}
