import type { Contender, ContenderSession } from './contender.js';

/**
 * The hand-off ceiling: a FIFO mutex inside this process, no Redis at all.
 * A release hands the lock straight to the longest waiter, so the lock is
 * never idle while someone waits; what is left is the hold time itself and
 * the timers' granularity.
 */
export function inProcessMutexContender(): Contender {
  return {
    id: 'in-process',
    label: 'in-process FIFO mutex (ceiling)',
    kind: 'floor',
    canWait: true,
    settings: 'no Redis: a release hands the lock to the longest waiter at once',
    async open(): Promise<ContenderSession> {
      const held = new Set<string>();
      const waiters = new Map<string, (() => void)[]>();
      const session: ContenderSession<string> = {
        acquire: (key) => {
          if (!held.has(key)) {
            held.add(key);
            return Promise.resolve(key);
          }
          return new Promise((resolve) => {
            const queue = waiters.get(key) ?? [];
            queue.push(() => resolve(key));
            waiters.set(key, queue);
          });
        },
        release: async (key) => {
          const next = waiters.get(key)?.shift();
          if (next) next();
          else held.delete(key);
        },
        close: async () => undefined,
      };
      return session as ContenderSession;
    },
  };
}
