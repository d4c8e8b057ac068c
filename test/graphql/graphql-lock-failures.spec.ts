import { describe, expect, it } from '@jest/globals';
import {
  LockAbortedError,
  LockBusyError,
  LockClosingError,
  LockConfigurationError,
  LockError,
  LockLostError,
  LockOptionsError,
  LockTimeoutError,
  LockUnavailableError,
} from '../../lib/engine/index.js';
import { LockKeyError, LockSetupError, lockGraphQLErrorBody } from '../../lib/index.js';

const resources = ['order:secret-42'];

// One row per error class: the end-to-end suite meets only those a resolver can provoke.
const errors: [string, LockError][] = [
  ['LOCK_BUSY', new LockBusyError(resources, 2500)],
  ['LOCK_TIMEOUT', new LockTimeoutError(resources, 2500, 4, 300)],
  [
    'LOCK_UNAVAILABLE',
    new LockUnavailableError(
      resources,
      [{ node: '10.0.0.7:6379', error: new Error('connect ECONNREFUSED') }],
      2,
      3,
    ),
  ],
  ['LOCK_CLOSING', new LockClosingError(resources)],
  ['LOCK_LOST', new LockLostError(resources, 'the nodes no longer hold it')],
  ['LOCK_ABORTED', new LockAbortedError(resources, new Error('client went away'))],
  ['LOCK_INVALID_OPTIONS', new LockOptionsError("ttl for 'order:secret-42' must be positive")],
  [
    'LOCK_INVALID_KEY',
    new LockKeyError(
      "OrdersResolver.pay: 'order:<0>' got undefined",
      'The request cannot be locked: <0> is undefined.',
    ),
  ],
  [
    'LOCK_UNSAFE_CONFIGURATION',
    new LockConfigurationError('10.0.0.7:6379 has appendonly off for order:secret-42'),
  ],
  ['LOCK_NOT_SET_UP', new LockSetupError('OrdersResolver.pay')],
  ['LOCK_ERROR', new LockError("something about 'order:secret-42'")],
];

describe('lockGraphQLErrorBody', () => {
  it.each(errors)(
    'gives %s its own code and a message that names no resource, node or class',
    (code, error) => {
      const { message, extensions } = lockGraphQLErrorBody(error);
      expect(extensions.code).toBe(code);
      expect(message).not.toContain('secret-42');
      expect(message).not.toContain('10.0.0.7');
      expect(message).not.toContain('OrdersResolver');
      expect(message).not.toBe(error.message);
    },
  );

  it('has one code per error class', () => {
    const codes = errors.map(([, error]) => lockGraphQLErrorBody(error).extensions.code);
    expect(new Set(codes).size).toBe(errors.length);
  });

  it('gives retryAfter in whole seconds, rounded up and never 0, only when the holder said', () => {
    expect(lockGraphQLErrorBody(new LockBusyError(resources, 2500)).extensions.retryAfter).toBe(3);
    expect(lockGraphQLErrorBody(new LockBusyError(resources, 1)).extensions.retryAfter).toBe(1);
    expect(
      lockGraphQLErrorBody(new LockTimeoutError(resources, 30_000, 9, 10_000)).extensions
        .retryAfter,
    ).toBe(30);
    expect(lockGraphQLErrorBody(new LockBusyError(resources, undefined)).extensions).toEqual({
      code: 'LOCK_BUSY',
    });
    for (const [, error] of errors.filter(([, e]) => !(e instanceof LockBusyError)))
      expect(lockGraphQLErrorBody(error).extensions).not.toHaveProperty('retryAfter');
  });

  it("tells a client the key's public message, as the HTTP body does", () => {
    const error = new LockKeyError(
      'internal detail',
      'The request cannot be locked: <0> is undefined.',
    );
    expect(lockGraphQLErrorBody(error).message).toBe(
      'The request cannot be locked: <0> is undefined.',
    );
  });
});
