import type { Cluster, Redis } from 'ioredis';
import { ALL_SCRIPTS, type LuaScript } from './lua-scripts.js';

/** Sends one script call to the server or cluster that holds its keys. */
export type ScriptCall = (
  script: LuaScript,
  keys: readonly string[],
  args: readonly (string | number)[],
) => Promise<unknown>;

/**
 * Runs the lock scripts by SHA on one node's client, with every script
 * loaded on a connection before its first call there.
 *
 * A server's script cache is empty after a restart, and a call by SHA would
 * then fail (NOSCRIPT). Re-sending such a call once its NOSCRIPT arrives
 * would let calls made after it run before it (a failed attempt's clean-up
 * before its own acquisition, which then leaves a key nobody holds), so every
 * script is loaded on a new connection ahead of its first call instead: the
 * connection delivers commands in order, so no call by SHA arrives before its
 * script.
 */
export class ScriptLoader {
  /** The connection the scripts were last loaded on. */
  private loadedOn: unknown;
  /** Why the last load of the scripts failed (an ACL without EVAL, say). */
  private loadError: Error | undefined;
  /** Script calls sent so far: a NOSCRIPT is re-sent only when no call left after it. */
  private sent = 0;

  constructor(
    private readonly client: Redis | Cluster,
    private readonly isCluster: boolean,
    /** The servers that hold the node's keys (a cluster's masters). */
    private readonly servers: () => Redis[],
  ) {}

  /** Loads the scripts on every master of a cluster (a server's connection gets them lazily). */
  loadEverywhere(): void {
    for (const server of this.servers()) {
      for (const script of ALL_SCRIPTS)
        server.eval(script.source, 0).then(this.loaded, this.notLoaded);
    }
  }

  private loadOn(server: Redis): void {
    const connection = server.status === 'ready' ? server.stream : undefined;
    if (connection !== undefined && connection === this.loadedOn) return;
    // Not connected yet (a client of the caller's that queues commands): the loads queue ahead.
    this.loadedOn = connection;
    for (const script of ALL_SCRIPTS)
      server.eval(script.source, 0).then(this.loaded, this.notLoaded);
  }

  private readonly loaded = () => (this.loadError = undefined);
  private readonly notLoaded = (error: unknown) => {
    this.loadError = error instanceof Error ? error : new Error(String(error));
  };

  /** Runs one script call (all its keys in one slot) by SHA. */
  readonly run = (
    script: LuaScript,
    keys: readonly string[],
    args: readonly (string | number)[],
    resent = false,
  ): Promise<unknown> => {
    const { client } = this;
    if (!this.isCluster) this.loadOn(client as Redis);
    const sequence = ++this.sent;
    return client.evalsha(script.sha, keys.length, ...keys, ...args).catch((error: unknown) => {
      if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT')) throw error;
      // The cache was flushed under a live connection (SCRIPT FLUSH), or a cluster's master is
      // new: the call did not run. Loaded again, and re-sent only if nothing left after it.
      if (this.isCluster) this.loadEverywhere();
      else this.loadedOn = undefined;
      if (!resent && sequence === this.sent) return this.run(script, keys, args, true);
      throw (
        this.loadError ??
        new Error(
          `the node had not loaded the lock scripts (${error.message.split('\n')[0]}); they are loaded again for the next call`,
        )
      );
    });
  };
}
