import { createRequire } from 'node:module';
import { keepAlive } from '../engine/keep-alive.js';
import type { AcquireOptions, Lock, LockEngine } from '../engine/index.js';
import { LockKeyError } from './locked-errors.js';

/**
 * A scheduled `@Locked()` job that did not run this time: its lock was held
 * by another instance, which runs or ran this tick.
 */
export interface SkippedRun {
  /** The job's name in `@Cron()` / `@Interval()` / `@Timeout()`, else `Class.method`. */
  readonly job: string;
  readonly resources: readonly string[];
  /** The tick (epoch ms) the run belonged to, when its key names `<tick>`. */
  readonly tick: number | undefined;
  /** ms until the holder's lease (or minimum hold) ends, when the nodes said. */
  readonly retryAfter: number | undefined;
}

declare module '../engine/lock-events.js' {
  interface LockEvents {
    /**
     * A scheduled `@Locked()` job (`@Cron()`, `@Interval()`, `@Timeout()` of
     * @nestjs/schedule) found its lock held and did not run: another instance
     * runs, or ran, this tick. Emitted by the Nest layer.
     */
    skipped: [event: SkippedRun];
  }
}

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

// --- Cron ticks ------------------------------------------------------------

interface CronOptions {
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
function cronTick(options: CronOptions, where: string): (now: number) => number {
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

// --- Minimum hold ----------------------------------------------------------

/**
 * Runs `routine` under a lock that stays taken until at least `holdAtLeast`
 * ms after its grant, even when the routine finished sooner (or threw): an
 * instance whose timer fires later then finds the tick done. The lease is
 * renewed while the routine runs (with `autoExtend`); when it returns, the
 * lease is set to end with the hold, so the hold outlives a crash of this
 * process, and the lock is released when the hold is over. Resolves with the
 * routine's result as soon as the routine returned and the hold was set.
 */
export async function runHeld<T>(
  engine: LockEngine,
  resources: readonly string[],
  options: AcquireOptions & { autoExtend: boolean },
  holdAtLeast: number,
  routine: (lock: Lock) => T | Promise<T>,
): Promise<T> {
  const { autoExtend, ...acquireOptions } = options;
  const lock = await engine.acquire(resources, acquireOptions);
  const holdEnd = performance.now() + holdAtLeast;
  const stopRenewing = autoExtend ? keepAlive(engine, lock) : undefined;
  try {
    return await routine(lock);
  } finally {
    stopRenewing?.();
    await holdUntil(engine, lock, holdEnd);
  }
}

/** Keeps `lock` on the nodes until `holdEnd` (performance.now() time), then releases it. */
async function holdUntil(engine: LockEngine, lock: Lock, holdEnd: number): Promise<void> {
  const remaining = holdEnd - performance.now();
  if (remaining <= 0 || !lock.isHeld) {
    await lock.release();
    return;
  }
  // A lease whose validity (the lease less the engine's drift allowance) covers the hold: the
  // nodes keep the key at least that long, and the release below comes after the hold.
  const ttl = Math.max(10, Math.ceil((remaining + 3) / (1 - engine.options.driftFactor)) + 1);
  try {
    await engine.extend(lock, ttl);
  } catch {
    // Lost: nothing is left to hold. Too few nodes answered: the lock is held until its
    // current validity ends, and released then.
  }
  if (!lock.isHeld) return;
  // The nodes end the hold by themselves now: a shutdown must neither wait for it nor cut it short.
  engine.leaveToExpire(lock);
  // Just before the validity ends, so that the lock is released rather than reported lost.
  const timer = setTimeout(
    () => void lock.release().catch(() => undefined),
    Math.max(0, lock.validUntil - 1 - performance.now()),
  );
  timer.unref();
}
