import type { LockEngine } from '../../engine/index.js';

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

declare module '../../engine/index.js' {
  interface LockEvents {
    /**
     * A scheduled `@Locked()` job (`@Cron()`, `@Interval()`, `@Timeout()` of
     * @nestjs/schedule) found its lock held and did not run: another instance
     * runs, or ran, this tick. Emitted by the Nest layer.
     */
    skipped: [event: SkippedRun];
  }
}

/**
 * Tells the listeners of `skipped` (the debug log, the telemetry counter) of a
 * scheduled run that did not happen; thrown, it would reach the scheduler's
 * error log.
 */
export function emitSkipped(engine: LockEngine, run: SkippedRun): void {
  if (engine.listenerCount('skipped') > 0) engine.emit('skipped', run);
}
