import type { Redis } from 'ioredis';
import type { Lock, RetryOptions } from '../../lib/engine/index.js';
import { compiledEngine, type EngineModule } from '../support/compiled-engine.js';
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
   * Hand the engine auto-pipelining ioredis clients instead of letting it
   * open its own (which do not auto-pipeline).
   */
  readonly autoPipeliningClients?: boolean;
  /** Retry policy of `wait` mode; default: the engine's default. */
  readonly retry?: RetryOptions;
  /**
   * Open this many engines (each with its own connections, wait queues and
   * release subscriptions) and give caller `worker` engine `worker % engines`:
   * callers in different processes, as far as the engine can tell. Default 1.
   */
  readonly engines?: number;
  /** Where the engine comes from; default: the working tree's lib/engine, compiled. */
  readonly load?: () => Promise<EngineModule>;
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
      const { LockEngine } = variant.load ? await variant.load() : (await compiledEngine()).engine;
      const clients: Redis[] = [];
      const engines: InstanceType<typeof LockEngine>[] = [];
      const close = async () => {
        await Promise.all(engines.map((engine) => engine.close()));
        await closeClients(clients);
      };
      try {
        for (let e = 0; e < (variant.engines ?? 1); e++) {
          const own = variant.autoPipeliningClients
            ? await openClients(urls, { autoPipelining: true })
            : undefined;
          if (own) clients.push(...own);
          const engine = new LockEngine({
            nodes: own ?? urls,
            ttl,
            fencing: variant.fencing ?? true,
            retry: variant.retry,
            logger: keepWarnings,
          });
          engines.push(engine);
          await engine.connect();
        }
      } catch (error) {
        await close().catch(() => undefined);
        throw error;
      }
      const [engine] = engines;
      const pick =
        engines.length === 1 ? () => engine : (worker = 0) => engines[worker % engines.length];
      const session: ContenderSession<Lock> = {
        acquire:
          mode === 'try'
            ? (key, worker) => pick(worker).tryAcquire(key)
            : (key, worker) => pick(worker).acquire(key),
        release: (lock) => lock.release(),
        close,
      };
      return session as ContenderSession;
    },
  };
}
