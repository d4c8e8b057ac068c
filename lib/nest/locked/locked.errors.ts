import { LockError, LockOptionsError } from '../../engine/index.js';

/** A key template or its value cannot make a resource name; the message says which and why. */
export class LockKeyError extends LockOptionsError {
  override readonly code = 'LOCK_INVALID_KEY';

  constructor(
    message: string,
    /** What a client may be told (no class, method or template); set for call-time errors. */
    readonly publicMessage = 'The request cannot be locked: its lock key could not be built.',
  ) {
    super(message);
  }
}

/**
 * A `@Locked()` method was called on an object no RedisLockModule has set up,
 * so it refuses to run unlocked.
 */
export class LockSetupError extends LockError {
  override readonly code = 'LOCK_NOT_SET_UP';

  constructor(where: string, decorator = 'Locked') {
    super(
      `${where} is @${decorator}(), but no RedisLockModule has set up its class, so it will not run unlocked. ` +
        'Import RedisLockModule.forRoot() (or forRootAsync()) in the application, and get the instance from Nest ' +
        '(inject it; an object made with `new` is not managed by Nest). In a test, call init() on the compiled ' +
        'testing module (or the app) first: RedisLockModule and RedisLockTestingModule set classes up on init.',
    );
  }
}

/**
 * A `@Locked(key, { mode })` or `@Limited()` method was called in an
 * application whose LockService has no read-write locks or semaphores: an
 * object put in its place (`overrideProvider(LockService).useValue(...)`)
 * without `readWriteLock()` and `semaphore()`.
 */
export class LockEngineUnsupportedError extends LockError {
  override readonly code = 'LOCK_ENGINE_UNSUPPORTED';

  constructor(where: string, what: string) {
    super(
      `${where}: ${what}, which this application's lock engine does not provide: the LockService in its ` +
        'place has no readWriteLock() and semaphore(). Use RedisLockTestingModule (or an InMemoryLockEngine) ' +
        'in tests, or RedisLockModule.',
    );
  }
}
