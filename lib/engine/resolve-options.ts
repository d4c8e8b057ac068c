import {
  LOCK_DEFAULTS,
  type LockEngineOptions,
  type LockLogger,
  type LockNodeSpec,
  type ResolvedEngineOptions,
} from './lock-options.js';
import { checkNodeSpec } from './node-specs.js';
import {
  checkBoolean,
  checkFraction,
  checkMs,
  describe,
  fail,
  isObject,
  rejectUnknownKeys,
  resolveRetry,
} from './option-checks.js';

const consoleLogger: LockLogger = {
  warn: (m) => console.warn(`[redis-lock] ${m}`),
  error: (m) => console.error(`[redis-lock] ${m}`),
};

/**
 * Every option, named once per type: `satisfies` fails to compile when an
 * option is added to (or removed from) the type without this list.
 */
const ENGINE_OPTION_KEYS = {
  nodes: true,
  keyPrefix: true,
  ttl: true,
  nodeTimeout: true,
  driftFactor: true,
  waitTimeout: true,
  unavailableTimeout: true,
  shutdownTimeout: true,
  retry: true,
  fencing: true,
  fenceCounter: true,
  fenceCounterTtl: true,
  extendThreshold: true,
  releaseNotifications: true,
  strict: true,
  checkNodes: true,
  logger: true,
} satisfies Record<keyof LockEngineOptions, true>;
const KNOWN_ENGINE_KEYS: ReadonlySet<string> = new Set(Object.keys(ENGINE_OPTION_KEYS));

/**
 * Refuses keys that are neither engine options nor `moduleKeys` (the options
 * a framework layer reads itself), naming them all in the message.
 */
export function rejectUnknownOptions(
  where: string,
  options: unknown,
  moduleKeys: readonly string[],
): void {
  if (isObject(options)) rejectUnknownKeys(where, options, KNOWN_ENGINE_KEYS, moduleKeys);
}

function checkFenceCounter(value: unknown): 'node' | 'resource' {
  if (value === 'node' || value === 'resource') return value;
  return fail(
    `fenceCounter must be 'node' (one counter per node, the default) or 'resource' (one per resource) (got ${describe(value)}).`,
  );
}

function checkFenceCounterTtl(value: unknown): number {
  if (value === 0) return 0;
  return checkMs(
    'fenceCounterTtl (0 keeps counters forever)',
    value,
    60_000,
    Number.MAX_SAFE_INTEGER,
  );
}

/** Validates the engine options once and merges the defaults. */
export function resolveEngineOptions(options: unknown): ResolvedEngineOptions {
  if (!isObject(options))
    fail('Lock options must be an object such as { nodes: ["redis://localhost:6379"] }.');
  rejectUnknownKeys('Lock options', options, KNOWN_ENGINE_KEYS);
  const { nodes } = options;
  if (typeof nodes === 'string') {
    const parts = nodes
      .split(',')
      .map((part) => part.trim())
      .filter(Boolean);
    fail(
      `nodes must be an array with one entry per Redis node, not one string (got ${describe(nodes)}). ` +
        `Write nodes: ${JSON.stringify(parts.length > 0 ? parts : ['redis://localhost:6379'])}` +
        (parts.length > 1 ? ", or split a comma-separated setting: nodes: value.split(',')." : '.'),
    );
  }
  if (!Array.isArray(nodes) || nodes.length === 0) {
    fail('nodes must list at least one Redis node, e.g. nodes: ["redis://localhost:6379"].');
  }
  nodes.forEach(checkNodeSpec);
  const keyPrefix = options.keyPrefix ?? LOCK_DEFAULTS.keyPrefix;
  if (typeof keyPrefix !== 'string' || /[{}]/.test(keyPrefix)) {
    fail(`keyPrefix must be a string without '{' or '}' (got ${describe(keyPrefix)}).`);
  }
  const ttl = checkMs('ttl', options.ttl ?? LOCK_DEFAULTS.ttl, 10);
  const nodeTimeout =
    options.nodeTimeout === undefined
      ? undefined
      : checkMs('nodeTimeout (at most half the ttl)', options.nodeTimeout, 1, Math.floor(ttl / 2));
  const logger = options.logger ?? consoleLogger;
  if (
    !isObject(logger) ||
    typeof logger.warn !== 'function' ||
    typeof logger.error !== 'function'
  ) {
    fail(
      'logger must have warn(message) and error(message) methods (a Nest Logger or console work).',
    );
  }
  return Object.freeze({
    nodes: Object.freeze([...(nodes as LockNodeSpec[])]),
    keyPrefix,
    ttl,
    nodeTimeout,
    driftFactor: checkFraction(
      'driftFactor',
      options.driftFactor ?? LOCK_DEFAULTS.driftFactor,
      0,
      0.5,
      'the usual value is 0.01',
    ),
    waitTimeout: checkMs('waitTimeout', options.waitTimeout ?? LOCK_DEFAULTS.waitTimeout, 0),
    unavailableTimeout: checkMs(
      'unavailableTimeout',
      options.unavailableTimeout ?? LOCK_DEFAULTS.unavailableTimeout,
      0,
    ),
    shutdownTimeout: checkMs(
      'shutdownTimeout',
      options.shutdownTimeout ?? LOCK_DEFAULTS.shutdownTimeout,
      0,
    ),
    retry: resolveRetry('retry', options.retry, LOCK_DEFAULTS.retry),
    fencing: checkBoolean('fencing', options.fencing ?? LOCK_DEFAULTS.fencing),
    fenceCounter: checkFenceCounter(options.fenceCounter ?? LOCK_DEFAULTS.fenceCounter),
    fenceCounterTtl: checkFenceCounterTtl(options.fenceCounterTtl ?? LOCK_DEFAULTS.fenceCounterTtl),
    extendThreshold: checkFraction(
      'extendThreshold',
      options.extendThreshold ?? LOCK_DEFAULTS.extendThreshold,
      0.1,
      0.9,
      'it is the fraction of the lease left when an extension starts',
    ),
    releaseNotifications: checkBoolean(
      'releaseNotifications',
      options.releaseNotifications ?? LOCK_DEFAULTS.releaseNotifications,
    ),
    strict: checkBoolean('strict', options.strict ?? LOCK_DEFAULTS.strict),
    checkNodes: checkBoolean('checkNodes', options.checkNodes ?? LOCK_DEFAULTS.checkNodes),
    logger: logger as unknown as LockLogger,
  });
}
