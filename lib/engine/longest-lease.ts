import type { Redis } from 'ioredis';
import type { LockNode } from './lock-node.js';
import { bounded } from './time-bound.js';

/**
 * Keeps the larger of the recorded lease and ARGV[1] in KEYS[1], for at
 * least ARGV[2] ms: a shorter lease never shortens the record or its life.
 */
const RECORD_LUA = `local recorded = tonumber(redis.call('GET', KEYS[1]))
if not recorded or recorded <= tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
elseif redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1`;

/** How long a record lasts at least; each engine writes its own again after half of it. */
const RECORD_LIFE_MS = 3_600_000;

/**
 * The longest lease that may stand on a node: what a node that restarted
 * without its data may have forgotten, and so how long its grants must not
 * count. Not only this engine's: other processes lock the same resources
 * with leases of their own (a per-call `ttl`, a `@Locked()` ttl). So every
 * engine records the longest lease it asks for on every node, in
 * `<keyPrefix>longest-lease` (before the call that asks for it, on the same
 * connection), and an engine that sees a node restart takes the longest
 * recorded on the other nodes. The record expires an hour (or two leases)
 * after an engine last wrote it, and each engine writes it again every half
 * of that while it locks. Best effort: a node that refuses the commands (an
 * ACL) leaves each engine with its own longest lease.
 */
export class LongestLease {
  /** The longest lease this engine has asked for (ms). */
  private longest: number;
  /**
   * What this engine last recorded, and when (performance.now()). Its own
   * ttl needs no call of its own: the restart watch records it on each node
   * as that node connects (see {@link recordOn}).
   */
  private recorded: number;
  private recordedAt = performance.now();

  constructor(
    private readonly nodes: readonly LockNode[],
    readonly key: string,
    ttl: number,
  ) {
    this.longest = ttl;
    this.recorded = ttl;
  }

  /** A call asks for a lease of `ttl` ms: recorded first if it is the longest yet (or the record ages). */
  note(ttl: number): void {
    if (ttl > this.longest) this.longest = ttl;
    if (this.longest > this.recorded || performance.now() - this.recordedAt > this.life() / 2)
      this.record();
  }

  /** Records this engine's longest lease on every node that is connected. */
  record(): void {
    this.recorded = this.longest;
    this.recordedAt = performance.now();
    for (const node of this.nodes) this.recordOn(node);
  }

  /** Records it on one node: after it (re)connected, since a restart forgets the record too. */
  recordOn(node: LockNode): void {
    if (node.topology === 'cluster' || node.client.status !== 'ready') return;
    const server = node.client as Redis;
    server.eval(RECORD_LUA, 1, this.key, this.longest, this.life()).catch(() => undefined);
  }

  /**
   * The longest lease that may stand on `restarted`: this engine's, or a
   * longer one another engine recorded on the other nodes (those that answer
   * within `timeoutMs`).
   */
  async onNode(restarted: LockNode, timeoutMs: number): Promise<number> {
    const others = this.nodes.filter(
      (node) => node !== restarted && node.topology !== 'cluster' && node.client.status === 'ready',
    );
    const records = await Promise.all(
      others.map((node) =>
        bounded((node.client as Redis).get(this.key), timeoutMs, { unref: true }).then(
          (value) => Number(value) || 0,
          () => 0,
        ),
      ),
    );
    return Math.max(this.longest, ...records);
  }

  private life(): number {
    return Math.max(RECORD_LIFE_MS, 2 * this.longest);
  }
}
