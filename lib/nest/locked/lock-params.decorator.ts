import type { Lock } from '../../engine/index.js';
import { LOCK_PARAMS_METADATA, type LockParam } from './locked.metadata.js';

function lockParam(decorator: string, pick: (lock: Lock) => unknown): ParameterDecorator {
  return (target, propertyKey, index) => {
    if (propertyKey === undefined) {
      throw new TypeError(
        '@CurrentLock(), @FencingToken() and @LockSignal() go on method parameters, not constructor parameters.',
      );
    }
    const params: LockParam[] =
      Reflect.getMetadata(LOCK_PARAMS_METADATA, target, propertyKey) ?? [];
    Reflect.defineMetadata(
      LOCK_PARAMS_METADATA,
      [...params, { index, decorator, pick }],
      target,
      propertyKey,
    );
  };
}

/**
 * Fills the parameter with the {@link Lock} held by the `@Locked()` method
 * (the innermost lock when re-entrant). The caller passes nothing there.
 *
 * @example
 * @Locked('order:<0>')
 * pay(id: number, @CurrentLock() lock?: Lock) { ... }
 */
export function CurrentLock(): ParameterDecorator {
  return lockParam('CurrentLock', (lock) => lock);
}

/**
 * Fills the parameter with the fencing token of the `@Locked()` method's lock.
 *
 * @example
 * @Post(':id/pay')
 * @Locked('order:<0>')
 * pay(@Param('id', ParseIntPipe) id: number, @FencingToken() token: number) {
 *   return this.orders.markPaid(id, token); // UPDATE ... WHERE last_token < :token
 * }
 */
export function FencingToken(): ParameterDecorator {
  return lockParam('FencingToken', (lock) => lock.token);
}

/** Fills the parameter with the lock's AbortSignal, aborted when the lock is lost. */
export function LockSignal(): ParameterDecorator {
  return lockParam('LockSignal', (lock) => lock.signal);
}
