import type { Redis } from 'ioredis';
import type { Lock, RetryOptions } from '../../lib/engine/index.js';
import { compiledEngine } from '../support/compiled-engine.js';
import {
  closeClients,
  openClients,
  type Contender,
  type ContenderSession,
  type OpenOptions,
} from './contender.js';

export interface OursVariant {
  readonly id: string;
  readonly label: string;
  readonly settings: string;
  /** Default true (the engine's default). */
  readonly fencing?: boolean;
  /**
   * Hand the engine plain ioredis clients (no auto-pipelining) instead of
   * letting it open its own (which auto-pipeline).
   */
  readonly plainClients?: boolean;
  /** Retry policy of `wait` mode; default: the engine's default. */
  readonly retry?: RetryOptions;
}

/** Warnings from connect() (appendonly no, on purpose here) are kept, not printed. */
export const engineWarnings: string[] = [];

const keepWarnings = {
  warn: (message: string) => void engineWarnings.push(message),
  error: (message: string) => void engineWarnings.push(message),
};

/** Our LockEngine. `try` mode: tryAcquire(); `wait` mode: acquire() with the variant's retry. */
export function oursContender(variant: OursVariant): Contender {
  return {
    id: variant.id,
    label: variant.label,
    kind: 'ours',
    canWait: true,
    settings: variant.settings,
    async open(urls: readonly string[], { mode, ttl }: OpenOptions): Promise<ContenderSession> {
      const { LockEngine } = (await compiledEngine()).engine;
      const clients: Redis[] = variant.plainClients
        ? await openClients(urls, { autoPipelining: false })
        : [];
      const engine = new LockEngine({
        nodes: variant.plainClients ? clients : urls,
        ttl,
        fencing: variant.fencing ?? true,
        retry: variant.retry,
        logger: keepWarnings,
      });
      await engine.connect();
      const session: ContenderSession<Lock> = {
        acquire: mode === 'try' ? (key) => engine.tryAcquire(key) : (key) => engine.acquire(key),
        release: (lock) => lock.release(),
        close: async () => {
          await engine.close();
          await closeClients(clients);
        },
      };
      return session as ContenderSession;
    },
  };
}
