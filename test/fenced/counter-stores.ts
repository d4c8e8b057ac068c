/** What the lost-update test (lost-updates.spec.ts) and its worker processes (counter-worker.ts) share. */
import type { PostgresConnection } from '../support/postgres.js';

export interface WorkerSettings {
  readonly lockNodes: readonly string[];
  /** The Redis holding the fenced hash; never faulted. */
  readonly storeRedis: string;
  readonly postgres: PostgresConnection;
  readonly sqliteFile: string;
  readonly resource: string;
  readonly ttl: number;
  /** Time between the read and the write: the work a holder does under its lock. */
  readonly workMs: number;
}

/** The stores, each with its counter row (id 1). */
export const STORES = [
  'pg',
  'typeorm-pg',
  'better-sqlite3',
  'kysely-sqlite',
  'redis',
  'write-only-pg',
  'write-only-sqlite',
] as const;
export type StoreName = (typeof STORES)[number];

/** The table (or hash) each store keeps its counter in. */
export const COUNTER_TABLES: Record<StoreName, string> = {
  pg: 'counter_pg',
  'typeorm-pg': 'counter_typeorm',
  'better-sqlite3': 'counter_sqlite',
  'kysely-sqlite': 'counter_kysely',
  redis: 'counter:{hash}',
  'write-only-pg': 'counter_write_only',
  'write-only-sqlite': 'counter_write_only',
};

export type WorkerMessage =
  | { readonly ev: 'ready' }
  | { readonly ev: 'read'; readonly token: number }
  | {
      readonly ev: 'wrote';
      readonly token: number;
      readonly accepted: StoreName[];
      readonly refused: StoreName[];
    }
  | {
      readonly ev: 'done';
      readonly accepted: Record<StoreName, number>;
      readonly refused: Record<StoreName, number>;
      readonly ops: number;
    }
  | { readonly ev: 'error'; readonly message: string };
