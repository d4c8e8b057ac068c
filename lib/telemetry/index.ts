// `nestjs-redis-lock/telemetry`: spans and metrics through @opentelemetry/api.
// A separate entry point, so that apps without OpenTelemetry never load it.
export {
  instrumentLocks,
  LOCK_INSTRUMENTATION_SCOPE,
  type LockOutcome,
  type LockTelemetry,
  type LockTelemetryOptions,
} from './lock.telemetry.js';
