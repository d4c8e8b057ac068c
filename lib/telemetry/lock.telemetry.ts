import {
  metrics,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Meter,
  type Tracer,
} from '@opentelemetry/api';
import {
  LockAbortedError,
  LockBusyError,
  LockOptionsError,
  LockTimeoutError,
  LockUnavailableError,
  type Lock,
  type LockEngine,
  type LockError,
  type LockEvents,
  type NodeResults,
} from '../engine/index.js';
// The `skipped` event of scheduled @Locked() jobs, which the Nest layer adds to the engine's events.
import type {} from '../nest/index.js';

/** The instrumentation scope name of the spans and metrics. */
export const LOCK_INSTRUMENTATION_SCOPE = 'nestjs-redis-lock';

/** Histogram buckets for lock latencies, in seconds: 1 ms to 10 s. */
const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

export interface LockTelemetryOptions {
  /** Where spans go. Default: `trace.getTracer('nestjs-redis-lock')` (the app's provider); `false`: no spans. */
  tracer?: Tracer | false;
  /** Where metrics go. Default: `metrics.getMeter('nestjs-redis-lock')`; `false`: no metrics. */
  meter?: Meter | false;
  /**
   * Attributes added to every metric point, from the locked resources. None
   * by default: resource names (`order:42`) would make one series per
   * resource. Return a bounded set, e.g. the resource's type.
   *
   * @example
   * metricAttributes: (resources) => ({ 'lock.resource_type': resources[0].split(':')[0] })
   */
  metricAttributes?: (resources: readonly string[]) => Attributes | undefined;
}

/** The handle {@link instrumentLocks} returns. */
export interface LockTelemetry {
  /** Stops the spans and metrics: removes every listener it added. */
  stop(): void;
}

/** How an acquisition ended, as the `lock.outcome` attribute says it. */
export type LockOutcome = 'acquired' | 'busy' | 'timeout' | 'unavailable' | 'aborted' | 'error';

function outcomeOf(error: LockError): LockOutcome {
  if (error instanceof LockTimeoutError) return 'timeout';
  if (error instanceof LockBusyError) return 'busy';
  if (error instanceof LockUnavailableError) return 'unavailable';
  if (error instanceof LockAbortedError) return 'aborted';
  return 'error';
}

/**
 * The end of a span in epoch ms, read off the wall clock when its event
 * comes, as the OpenTelemetry SDK places its own spans; its start is that
 * minus the duration the event measured on the monotonic clock. Not
 * `performance.timeOrigin + performance.now()`: the wall clock moves against
 * the monotonic one after the process started (a step, a paused VM), and the
 * spans would then sit seconds away from their SDK parent.
 */
const now = () => Date.now();

function nodeAttributes(nodes: NodeResults | undefined, total: number): Attributes {
  return nodes
    ? {
        'lock.nodes.total': total,
        'lock.nodes.granted': nodes.granted,
        'lock.nodes.denied': nodes.denied,
        'lock.nodes.failed': nodes.failed,
      }
    : { 'lock.nodes.total': total };
}

function lockAttributes(lock: Lock): Attributes {
  const attributes: Attributes = { 'lock.resources': [...lock.resources], 'lock.ttl': lock.ttl };
  if (lock.token !== undefined) attributes['lock.token'] = lock.token;
  return attributes;
}

/**
 * Reports an engine's (or `LockService`'s) locks through OpenTelemetry, to
 * whatever the application already exports to:
 *
 * - spans `lock.acquire`, `lock.extend`, `lock.release` (with their real
 *   start and end) and `lock.lost`, with the resources, fencing token,
 *   attempts, outcome and how the nodes answered; a failed acquisition's
 *   span has status ERROR and `error.type` (the error's code);
 * - metrics `lock.acquire.duration` (histogram, seconds, by `lock.outcome`),
 *   `lock.contentions` (attempts that found the lock held), `lock.held`
 *   (locks held now by this process), `lock.lost` and `lock.skipped` (runs
 *   of scheduled `@Locked()` jobs left to another instance, by `lock.job`).
 *
 * The spans are children of the span active where the lock was taken.
 * Nothing is measured until this is called; `stop()` undoes it.
 *
 * @example
 * // main.ts, after NestFactory.create():
 * instrumentLocks(app.get(LockService));
 */
export function instrumentLocks(
  engine: LockEngine,
  options: LockTelemetryOptions = {},
): LockTelemetry {
  const given = engine as Partial<LockEngine> | null | undefined;
  if (typeof given?.on !== 'function' || !Array.isArray(given.nodes)) {
    throw new LockOptionsError(
      'instrumentLocks() takes a LockEngine, or the LockService Nest injects (app.get(LockService)).',
    );
  }
  const tracer =
    options.tracer === false
      ? undefined
      : (options.tracer ?? trace.getTracer(LOCK_INSTRUMENTATION_SCOPE));
  const meter =
    options.meter === false
      ? undefined
      : (options.meter ?? metrics.getMeter(LOCK_INSTRUMENTATION_SCOPE));
  const extra = options.metricAttributes;
  const total = engine.nodes.length;

  const latency = meter?.createHistogram('lock.acquire.duration', {
    description: 'Time to acquire a lock, from the first attempt to the grant or the failure.',
    unit: 's',
    advice: { explicitBucketBoundaries: LATENCY_BUCKETS },
  });
  const contentions = meter?.createCounter('lock.contentions', {
    description: 'Acquisition attempts that found the lock held by another holder.',
    unit: '{attempt}',
  });
  const held = meter?.createUpDownCounter('lock.held', {
    description: 'Locks held by this process.',
    unit: '{lock}',
  });
  const skippedRuns = meter?.createCounter('lock.skipped', {
    description:
      'Runs of scheduled @Locked() jobs skipped because another instance held the lock (it runs or ran that tick), by `lock.job`.',
    unit: '{run}',
  });
  const lost = meter?.createCounter('lock.lost', {
    description: 'Locks lost before their release: the lease ran out or another holder took over.',
    unit: '{lock}',
  });
  /** Locks counted in `lock.held`, so that a lost lock that is then released counts down once. */
  const holding = new WeakSet<Lock>();
  const countDown = (lock: Lock) => {
    if (holding.delete(lock)) held?.add(-1, extra?.(lock.resources));
  };

  const span = (
    name: string,
    start: number,
    end: number,
    attributes: Attributes,
    error?: { code: string; message: string },
  ) => {
    if (!tracer) return;
    const span = tracer.startSpan(name, { kind: SpanKind.INTERNAL, startTime: start, attributes });
    if (error) {
      span.setAttribute('error.type', error.code);
      span.setStatus({ code: SpanStatusCode.ERROR, message: error.message });
    }
    span.end(end);
  };

  const listeners: { [N in keyof LockEvents]?: (...args: LockEvents[N]) => void } = {
    acquired: ({ lock, attempts, waited, nodes }) => {
      const end = now();
      span('lock.acquire', end - waited, end, {
        ...lockAttributes(lock),
        'lock.attempts': attempts,
        'lock.outcome': 'acquired',
        ...nodeAttributes(nodes, total),
      });
      const attributes = extra?.(lock.resources);
      latency?.record(waited / 1000, { ...attributes, 'lock.outcome': 'acquired' });
      if (held) {
        holding.add(lock);
        held.add(1, attributes);
      }
    },
    failed: ({ resources, attempts, waited, error, nodes }) => {
      const end = now();
      const outcome = outcomeOf(error);
      span(
        'lock.acquire',
        end - waited,
        end,
        {
          'lock.resources': [...resources],
          'lock.attempts': attempts,
          'lock.outcome': outcome,
          ...nodeAttributes(nodes, total),
        },
        error,
      );
      latency?.record(waited / 1000, { ...extra?.(resources), 'lock.outcome': outcome });
    },
    contended: ({ resources }) => contentions?.add(1, extra?.(resources)),
    // One series per job: the jobs of an application are few, unlike the resources.
    skipped: ({ job, resources }) =>
      skippedRuns?.add(1, { ...extra?.(resources), 'lock.job': job }),
    extended: ({ lock, duration, nodes }) => {
      const end = now();
      span('lock.extend', end - duration, end, {
        ...lockAttributes(lock),
        ...nodeAttributes(nodes, total),
      });
    },
    released: ({ lock, result, held: heldFor, duration, nodes }) => {
      const end = now();
      span('lock.release', end - duration, end, {
        ...lockAttributes(lock),
        'lock.released': result.released,
        'lock.held_ms': heldFor,
        ...nodeAttributes(nodes, total),
      });
      countDown(lock);
    },
    lost: ({ lock, error, held: heldFor }) => {
      const end = now();
      span('lock.lost', end, end, { ...lockAttributes(lock), 'lock.held_ms': heldFor }, error);
      lost?.add(1, extra?.(lock.resources));
      countDown(lock);
    },
  };
  if (!tracer) delete listeners.extended;
  if (!meter) {
    delete listeners.contended;
    delete listeners.skipped;
  }
  if (!tracer && !meter) return { stop: () => undefined };

  for (const [name, listener] of Object.entries(listeners))
    engine.on(name as keyof LockEvents, listener as never);
  return {
    stop: () => {
      for (const [name, listener] of Object.entries(listeners))
        engine.off(name as keyof LockEvents, listener as never);
    },
  };
}
