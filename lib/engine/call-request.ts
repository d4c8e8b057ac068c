import type { EngineContext } from './engine-context.js';
import { LockOptionsError } from './lock-errors.js';
import {
  type AcquireOptions,
  type ResolvedEngineOptions,
  type ResolvedRetry,
  type RetryOptions,
  type TryAcquireOptions,
  type UsingOptions,
} from './lock-options.js';
import { checkMs } from './option-checks.js';
import type { RoundResult } from './quorum-round.js';
import { lineLease } from './retry-delay.js';

/** The retry policy of `tryAcquire()`: one attempt. */
const SINGLE_ATTEMPT: RetryOptions = Object.freeze({ attempts: 0 });

/** What a call that waits takes and `tryAcquire()` refuses (see TryAcquireOptions). */
const WAITING_OPTIONS: readonly string[] = ['waitTimeout', 'retry', 'unavailableTimeout'];

/**
 * The acquisition of `tryAcquire()`: its options with the one-attempt retry
 * policy. An option about waiting is refused rather than ignored: a caller
 * who set one expected a wait it would not get.
 */
export function singleAttempt(options: TryAcquireOptions): AcquireOptions {
  // Not an object: left to checkCallOptions(), which says what to pass.
  if (options === null || typeof options !== 'object') return options;
  for (const key of WAITING_OPTIONS) {
    if (key in options) {
      throw new LockOptionsError(
        `tryAcquire() makes one attempt and takes ttl and signal only (got '${key}'); ` +
          `to wait for the lock, call acquire() with waitTimeout and retry.`,
      );
    }
  }
  return { ...options, retry: SINGLE_ATTEMPT };
}

/**
 * Fence counters created with a TTL start at the wall clock in ms times this:
 * above any token of an earlier counter for the resource as long as it saw
 * fewer than 1,024 grants per ms of its life, and below 2^53 until 2248.
 */
const FENCE_SEED_SCALE = 1024;

/** The last seed's ms and text: an acquire script's argument, written once per ms, not per call. */
let seedMs = -1;
let seedText = '0';

/**
 * The start of a fence counter created now, as the scripts take it ('0'
 * where counters never expire or fencing is off).
 */
export function fenceSeed(options: ResolvedEngineOptions): string {
  if (!options.fencing || options.fenceCounterTtl <= 0) return '0';
  const now = Date.now();
  if (now !== seedMs) {
    seedMs = now;
    seedText = String(now * FENCE_SEED_SCALE);
  }
  return seedText;
}

/** The options a single call takes (`autoExtend` and `onReleased` only with using()), each named once. */
const CALL_OPTIONS: ReadonlySet<string> = new Set(
  Object.keys({
    ttl: true,
    waitTimeout: true,
    unavailableTimeout: true,
    retry: true,
    signal: true,
    autoExtend: true,
    onReleased: true,
  } satisfies Record<keyof UsingOptions, true>),
);

/** Checks a call's options object: its shape, its keys, and the types the timings do not check. */
export function checkCallOptions(options: unknown): asserts options is UsingOptions {
  if (options === null || typeof options !== 'object') {
    throw new LockOptionsError(
      `Lock options must be an object such as { ttl: 5000 } (got ${String(options)}).`,
    );
  }
  for (const key in options) {
    if (!CALL_OPTIONS.has(key)) {
      throw new LockOptionsError(
        `There is no lock option '${key}'; a call takes ${[...CALL_OPTIONS].join(', ')}.`,
      );
    }
  }
  const { onReleased, autoExtend, signal } = options as UsingOptions;
  if (onReleased !== undefined && typeof onReleased !== 'function') {
    throw new LockOptionsError(
      `onReleased must be a function that takes the release result (got ${typeof onReleased}).`,
    );
  }
  if (autoExtend !== undefined && typeof autoExtend !== 'boolean') {
    throw new LockOptionsError(`autoExtend must be true or false (got ${typeof autoExtend}).`);
  }
  if (signal !== undefined && !(signal instanceof AbortSignal)) {
    throw new LockOptionsError('signal must be an AbortSignal (from an AbortController).');
  }
}

/** A call's timings: its options over the engine's defaults, checked. */
export interface CallTimings {
  readonly ttl: number;
  readonly retry: ResolvedRetry;
  readonly waitTimeout: number;
  readonly unavailableTimeout: number;
}

/** Resolves a call's timings; `retryPolicy` resolves (and may cache) a call's retry options. */
export function callTimings(
  options: UsingOptions,
  defaults: ResolvedEngineOptions,
  retryPolicy: (retry: RetryOptions) => ResolvedRetry,
): CallTimings {
  return {
    ttl: options.ttl === undefined ? defaults.ttl : checkMs('ttl', options.ttl, 10),
    retry: options.retry === undefined ? defaults.retry : retryPolicy(options.retry),
    waitTimeout:
      options.waitTimeout === undefined
        ? defaults.waitTimeout
        : checkMs('waitTimeout', options.waitTimeout, 0),
    unavailableTimeout:
      options.unavailableTimeout === undefined
        ? defaults.unavailableTimeout
        : checkMs('unavailableTimeout', options.unavailableTimeout, 0),
  };
}

/** One acquisition as the loop tracks it (see acquisition.ts). */
export interface CallRequest extends CallTimings {
  readonly resources: readonly string[];
  /** The keys whose releases wake this acquisition (release messages name them). */
  readonly keys: readonly string[];
  /**
   * The queue this acquisition waits in among this process's callers: callers of the same
   * queue wait their turn first come first served. Undefined: a queue of its own.
   */
  readonly queueId: string | undefined;
  readonly nodeTimeout: number;
  readonly drift: number;
  readonly signal: AbortSignal | undefined;
  /** The first attempt's LockBusyError message, when the primitive words it its own way. */
  readonly busyMessage?: string;
  /** performance.now() when the acquisition began. */
  readonly started: number;
  /** Set once the acquisition waits (lines up or sleeps before another attempt), for the `waited` event. */
  waiting: boolean;
  /** Epoch ms on the nodes' clock when the acquisition began: its place in the nodes' lines. */
  readonly arrival: number;
  /** How long a refused attempt keeps its place in the nodes' lines; 0 when it will not retry. */
  readonly lineLease: number;
  /** Names this acquisition in the nodes' lines: the value of its first attempt. */
  waiter: string;
  /** Set once a refused attempt joined the nodes' lines (and must leave them). */
  inLine: boolean;
  /** The caller's signal joined with the engine's shutdown, made once the acquisition waits. */
  waitSignal?: AbortSignal;
  /** The round that granted the lock, once one did. */
  granting?: RoundResult<unknown>;
}

/** Builds a request from a call's options (checked here) over the engine's defaults. */
export function callRequest<E extends object>(
  context: EngineContext,
  resources: readonly string[],
  keys: readonly string[],
  queueId: string | undefined,
  options: UsingOptions,
  busyMessage: string | undefined,
  extra: E,
): CallRequest & E {
  checkCallOptions(options);
  const timings = callTimings(options, context.options, context.retryPolicy);
  context.noteTtl(timings.ttl);
  // Every field spelled out and set from the start, the primitive's own (`extra`) added right
  // after: a spread into the literal, or a field added later on, took V8's slow path for the
  // whole object, a quarter of the engine's CPU per uncontended cycle.
  const request: CallRequest = {
    ttl: timings.ttl,
    retry: timings.retry,
    waitTimeout: timings.waitTimeout,
    unavailableTimeout: timings.unavailableTimeout,
    resources,
    keys,
    queueId,
    nodeTimeout: context.nodeTimeout(timings.ttl),
    drift: context.drift(timings.ttl),
    signal: options.signal,
    busyMessage,
    started: performance.now(),
    waiting: false,
    arrival: context.arrival(),
    lineLease: timings.retry.attempts > 0 ? lineLease(timings.retry) : 0,
    waiter: '',
    inLine: false,
    waitSignal: undefined,
    granting: undefined,
  };
  return Object.assign(request, extra);
}

/**
 * Names an acquisition in the nodes' lines, once, at its first attempt
 * (`value`: that attempt's lease value). A call that may wait gets the
 * release channel's name for it (see ReleaseChannel.waiterName); a single
 * attempt never joins a line and keeps the value, with no work on its path.
 */
export function nameWaiter(context: EngineContext, request: CallRequest, value: string): void {
  if (request.waiter !== '') return;
  request.waiter = request.lineLease > 0 ? (context.channel?.waiterName(value) ?? value) : value;
}
