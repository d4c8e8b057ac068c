/**
 * The stores the chaos clients write under their locks:
 *
 * - a fenced SQLite table, written with the one-statement fence
 *   `UPDATE ... WHERE id = ? AND last_token < ?`;
 * - a fenced Redis store: a check-and-set script that keeps the last token
 *   beside the value;
 * - an unfenced control counter (GET, then SET to the value read plus one),
 *   which loses updates when two holders overlap: proof that the harness can
 *   see the bug the fences prevent.
 *
 * Both fenced stores log every accepted write in the same statement or
 * script, so the checker can compare what was acknowledged with what was kept.
 */
import Database from 'better-sqlite3';
import type { Redis } from 'ioredis';
import type { StoreEntry, StoreSnapshot } from './history.js';

const SCHEMA = `
CREATE TABLE IF NOT EXISTS items (
  id TEXT PRIMARY KEY,
  last_token INTEGER NOT NULL,
  payload TEXT
);
CREATE TABLE IF NOT EXISTS item_log (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL,
  token INTEGER NOT NULL,
  payload TEXT NOT NULL
);
CREATE TRIGGER IF NOT EXISTS item_audit AFTER UPDATE ON items BEGIN
  INSERT INTO item_log (id, token, payload) VALUES (NEW.id, NEW.last_token, NEW.payload);
END;
`;

export class SqliteFencedStore {
  private readonly db: Database.Database;
  private readonly ensureRow: Database.Statement;
  private readonly fencedUpdate: Database.Statement;

  /**
   * Opens (and with `create`, sets up) the store. The harness creates it
   * before the clients start, so that they never race to set it up.
   */
  constructor(path: string, create = false) {
    // Several client processes write; a writer paused mid-statement must not fail the others at
    // once. Set on open, before any statement that could meet a lock.
    this.db = new Database(path, { timeout: 3000, fileMustExist: !create });
    if (create) {
      this.db.pragma('journal_mode = WAL');
      this.db.exec(SCHEMA);
    }
    this.db.pragma('synchronous = FULL');
    this.ensureRow = this.db.prepare('INSERT OR IGNORE INTO items (id, last_token) VALUES (?, 0)');
    this.fencedUpdate = this.db.prepare(
      'UPDATE items SET last_token = ?, payload = ? WHERE id = ? AND last_token < ?',
    );
  }

  /** True when accepted; false when a write with this token or a later one came first. */
  write(resource: string, token: number, payload: string): boolean {
    this.ensureRow.run(resource);
    return this.fencedUpdate.run(token, payload, resource, token).changes === 1;
  }

  snapshot(): StoreSnapshot {
    const log = this.db.prepare('SELECT id, token, payload FROM item_log ORDER BY seq').all() as {
      id: string;
      token: number;
      payload: string;
    }[];
    const rows = this.db.prepare('SELECT id, last_token, payload FROM items').all() as {
      id: string;
      last_token: number;
      payload: string | null;
    }[];
    return {
      name: 'sqlite',
      log: log.map((e): StoreEntry => ({ resource: e.id, token: e.token, payload: e.payload })),
      rows: new Map(rows.map((r) => [r.id, { token: r.last_token, payload: r.payload }])),
    };
  }

  close(): void {
    this.db.close();
  }
}

/**
 * KEYS: the item hash, its log list. ARGV: token, payload.
 * Returns 1 when written, 0 when the stored token is not lower.
 */
const FENCED_WRITE = `
local last = tonumber(redis.call('HGET', KEYS[1], 'token') or '0')
if last >= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'payload', ARGV[2])
redis.call('RPUSH', KEYS[2], ARGV[1] .. ' ' .. ARGV[2])
return 1`;

const itemKey = (resource: string) => `store:{${resource}}`;
const logKey = (resource: string) => `store:{${resource}}:log`;
const controlKey = (resource: string) => `control:{${resource}}`;
const RESOURCES_KEY = 'store:resources';

export class RedisFencedStore {
  constructor(private readonly client: Redis) {}

  async write(resource: string, token: number, payload: string): Promise<boolean> {
    await this.client.sadd(RESOURCES_KEY, resource);
    const reply = await this.client.eval(
      FENCED_WRITE,
      2,
      itemKey(resource),
      logKey(resource),
      String(token),
      payload,
    );
    return reply === 1;
  }

  /** Reads the unfenced counter. */
  async readControl(resource: string): Promise<number> {
    return Number((await this.client.get(controlKey(resource))) ?? 0);
  }

  /** Writes the unfenced counter: last writer wins, whatever it read. */
  async writeControl(resource: string, value: number): Promise<void> {
    await this.client.sadd(RESOURCES_KEY, resource);
    await this.client.set(controlKey(resource), value);
  }

  async snapshot(): Promise<{ store: StoreSnapshot; control: Map<string, number> }> {
    const resources = await this.client.smembers(RESOURCES_KEY);
    const log: StoreEntry[] = [];
    const rows = new Map<string, { token: number; payload: string | null }>();
    const control = new Map<string, number>();
    for (const resource of resources.sort()) {
      for (const entry of await this.client.lrange(logKey(resource), 0, -1)) {
        const space = entry.indexOf(' ');
        log.push({
          resource,
          token: Number(entry.slice(0, space)),
          payload: entry.slice(space + 1),
        });
      }
      const [token, payload] = await this.client.hmget(itemKey(resource), 'token', 'payload');
      rows.set(resource, { token: Number(token ?? 0), payload });
      control.set(resource, await this.readControl(resource));
    }
    // The log is per resource; acceptance order matters only within one.
    return { store: { name: 'redis', log, rows }, control };
  }
}
