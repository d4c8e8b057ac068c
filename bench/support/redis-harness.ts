/**
 * The project's redis-server harness (test/support/redis-nodes.ts), loaded
 * outside Jest. That module imports `beforeAll`/`afterAll` from
 * `@jest/globals` for its `useRedisNodes()` helper, and `@jest/globals` throws
 * when imported outside a Jest run. A module-resolution hook answers that one
 * import with no-op stubs before the harness is loaded; the bench only uses
 * `startRedisNodes` / `stopRedisNodes`, which never touch Jest.
 */
import { register } from 'node:module';

const STUB = 'export const beforeAll = () => {}; export const afterAll = () => {};';
const HOOK = `export async function resolve(specifier, context, next) {
  if (specifier === '@jest/globals') {
    return { url: 'data:text/javascript,' + encodeURIComponent(${JSON.stringify(STUB)}), shortCircuit: true };
  }
  return next(specifier, context);
}`;

register(`data:text/javascript,${encodeURIComponent(HOOK)}`);

const harness = await import('../../test/support/redis-nodes.js');

export const { startRedisNodes, stopRedisNodes } = harness;
export type { RedisNodeProcess } from '../../test/support/redis-nodes.js';
