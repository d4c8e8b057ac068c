/**
 * Fails a test when a promise was rejected without a handler while it ran,
 * or while its faults played out afterwards (late replies, cleanup rounds).
 *
 * Jest gives each test file its own `process` object; rejections are
 * reported on the host process, so the listener goes there, next to Jest's
 * own (which stays in place).
 */
import { afterAll, afterEach, beforeAll, expect } from '@jest/globals';
import { runInThisContext } from 'node:vm';

const hostProcess = runInThisContext('process') as NodeJS.Process;

export interface RejectionWatch {
  /** Reasons of the rejections seen since the last check. */
  readonly seen: unknown[];
  /** Lets Node report pending rejections (it does after the microtask queue drains), then returns them. */
  flush(): Promise<unknown[]>;
}

export function failOnUnhandledRejections(): RejectionWatch {
  const seen: unknown[] = [];
  const listener = (reason: unknown) => void seen.push(reason);
  const watch: RejectionWatch = {
    seen,
    async flush() {
      await new Promise((resolve) => setImmediate(resolve));
      return seen.splice(0);
    },
  };
  beforeAll(() => void hostProcess.on('unhandledRejection', listener));
  afterEach(async () => {
    expect(await watch.flush()).toEqual([]);
  });
  afterAll(() => void hostProcess.off('unhandledRejection', listener));
  return watch;
}
