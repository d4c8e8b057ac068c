// `nestjs-redis-lock/fenced`: writes that a lock holder paused past its lease
// cannot get through, for the stores apps keep their data in. Framework-free;
// each adapter works on the client the application passes in, so no driver or
// ORM is loaded by importing this entry point (Kysely's on its first statement).
export {
  FencedColumnError,
  FencedRowMissingError,
  FencedRowNotClaimedError,
  FencedValueChangedError,
  FencedWriteError,
  FencedWriteRejectedError,
} from './fenced-errors.js';
export type {
  FencedRow,
  FencedTable,
  FencedTableOptions,
  FencedWriteOptions,
  RowKey,
  SqlDialect,
} from './fenced-types.js';
export { pgFence, type PgQueryable } from './pg.js';
export { sqliteFence, SqliteFencedTable, type SqliteDatabase } from './sqlite.js';
export { typeormFence } from './typeorm.js';
export { kyselyFence, type KyselyFenceOptions } from './kysely.js';
export {
  redisFence,
  type FencedHash,
  type FencedHashWriteOptions,
  type HashFields,
  type RedisFenceOptions,
} from './redis.js';
