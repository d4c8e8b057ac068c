import type { Redis } from 'ioredis';
import type { LockNode } from './lock-node.js';
import type { LongestLease } from './longest-lease.js';
import { parseInfo } from './node-checks.js';

/** A node came back as a new server process (its INFO run_id changed). */
export interface NodeRestart {
  /** The node's label (`host:port`). */
  readonly node: string;
  /** The new run id; undefined when INFO could not be read after the reconnect. */
  readonly runId: string | undefined;
  /** True when it proved it kept its data: appendonly yes with appendfsync always. */
  readonly persistent: boolean;
  /** How long its grants do not count toward a quorum (ms; 0 when persistent). */
  readonly excludedFor: number;
}

/**
 * Watches one node for restarts. A node that restarted without its data has
 * forgotten the locks it granted; counted at once, it could grant a lock that
 * stands on exactly a quorum including it to a second holder. So after a
 * restart without proof of persistence its grants do not count toward a
 * quorum for the longest lease it could have held (the delayed restart of
 * Redlock, applied by the client): by then every lock it forgot has expired.
 * That lease is the longest any engine recorded on the nodes, not only this
 * engine's (see LongestLease).
 *
 * Only a restart this process sees can be told: an engine that first connects
 * after the restart has no earlier run id to compare. A cluster node is not
 * watched (its masters fail over by design; see docs/topologies.md).
 */
export class RestartWatch {
  private runId: string | undefined;
  private checking: Promise<void> | undefined;
  /** Set when the connection dropped after the run id was known, until it is read again. */
  private unverified = false;
  private excludedUntil = 0;

  constructor(
    private readonly node: LockNode,
    /** The longest lease a lock can have on the node (this engine's, or one recorded there). */
    private readonly lease: LongestLease,
    /** How long reading the other nodes' records may take (ms). */
    private readonly readTimeout: number,
    private readonly restarted: (restart: NodeRestart) => void,
  ) {
    if (node.topology === 'cluster') return;
    const client = node.client as Redis;
    client.on('close', () => {
      if (this.runId !== undefined) this.unverified = true;
    });
    client.on('ready', () => void this.check());
  }

  /**
   * Pending while a reconnected node's run id is being read (one INFO round
   * trip): an attempt waits for it rather than send the node a request whose
   * grant could not count. Started here too, when the connection is ready but
   * its 'ready' event has not been handled yet.
   */
  pending(): Promise<void> | undefined {
    if (this.checking) return this.checking;
    if (this.unverified && this.node.client.status === 'ready') return this.check();
    return undefined;
  }

  /** Why the node's grants do not count toward a quorum now; undefined when they do. */
  excluded(): string | undefined {
    if (this.unverified) return 'it reconnected, and whether it restarted is not known yet';
    const left = this.excludedUntil - performance.now();
    if (left <= 0) return undefined;
    return `it restarted without proof that it kept its data; its grants count again in ${Math.ceil(left)} ms`;
  }

  /** Reads the node's run id (once at a time); resolves when done, never rejects. */
  check(): Promise<void> {
    if (this.node.topology === 'cluster') return Promise.resolve();
    this.checking ??= this.read().finally(() => (this.checking = undefined));
    return this.checking;
  }

  private async read(): Promise<void> {
    const client = this.node.client as Redis;
    let runId: string | undefined;
    let persistent = false;
    try {
      const [server, persistence, appendfsync] = await Promise.all([
        client.info('server'),
        client.info('persistence'),
        client
          .config('GET', 'appendfsync')
          .then((reply) => (Array.isArray(reply) ? String(reply[1]) : undefined))
          .catch(() => undefined),
      ]);
      runId = parseInfo(String(server)).get('run_id');
      persistent =
        parseInfo(String(persistence)).get('aof_enabled') === '1' && appendfsync === 'always';
    } catch {
      // INFO denied, or the connection dropped again: the node cannot vouch for itself.
    }
    const known = this.runId;
    const wasUnverified = this.unverified;
    if (runId !== undefined) this.runId = runId;
    const restarted =
      known !== undefined && runId !== known && (runId !== undefined || wasUnverified);
    // Still unverified (its grants do not count) until the exclusion below is in place.
    const excludedFor =
      restarted && !persistent ? await this.lease.onNode(this.node, this.readTimeout) : 0;
    if (excludedFor > 0)
      this.excludedUntil = Math.max(this.excludedUntil, performance.now() + excludedFor);
    this.unverified = false;
    // A new connection: the record of the longest lease may be gone with a restart.
    this.lease.recordOn(this.node);
    if (restarted) this.restarted({ node: this.node.label, runId, persistent, excludedFor });
  }
}

/** What the engine logs about a restart: whether the node counts at once, or for how long it does not. */
export function restartWarning(restart: NodeRestart): string {
  return restart.persistent
    ? `Node ${restart.node} restarted (run id ${restart.runId}); it keeps its data (appendonly, appendfsync always), so its grants count at once.`
    : `Node ${restart.node} restarted${restart.runId === undefined ? ' or could not be checked (INFO failed)' : ''} without proof that it kept its data ` +
        `(appendonly yes with appendfsync always): its grants do not count toward a quorum for ${restart.excludedFor} ms, the longest lease it may have forgotten.`;
}
