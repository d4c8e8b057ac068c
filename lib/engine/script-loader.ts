import type { Cluster, Redis } from 'ioredis';
import { ALL_SCRIPTS, type LuaScript } from './lua-scripts.js';

/** Sends one script call to the server or cluster that holds its keys. */
export type ScriptCall = (
  script: LuaScript,
  keys: readonly string[],
  args: readonly (string | number)[],
) => Promise<unknown>;

/** A script call kept until it can leave, with its caller's promise to settle. */
export interface QueuedCall {
  readonly script: LuaScript;
  readonly keys: readonly string[];
  readonly args: readonly (string | number)[];
  resolve(reply: unknown): void;
  reject(error: unknown): void;
}

/** A server's call kept back: refused with NOSCRIPT and waiting to go again, or made meanwhile. */
interface HeldCall extends QueuedCall {
  /** The NOSCRIPT that refused it (none for a call made meanwhile). */
  readonly refusal?: Error;
}

const isNoScript = (error: unknown): error is Error =>
  error instanceof Error && error.message.startsWith('NOSCRIPT');

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
 *
 * The cache can also be flushed under a live connection (SCRIPT FLUSH). On a
 * server, the calls refused then are sent again, in their order, once every
 * call sent before the refusal came to light has answered; calls made in the
 * meantime wait and follow them. So nothing runs out of order, and nothing
 * the flush caught is lost. If any call sent after a refused one did run (the
 * scripts were loaded again between them, by another client), the refused
 * calls fail instead: sent again, they would run after it. On a cluster
 * (calls to several masters, whose replies come in no common order), a
 * refused call is sent again only when no call left after it.
 */
export class ScriptLoader {
  /** The connection the scripts were last loaded on. */
  private loadedOn: unknown;
  /** Why the last load of the scripts failed (an ACL without EVAL, say). */
  private loadError: Error | undefined;
  /** Script calls sent so far. */
  private sent = 0;
  /** A server's calls sent and not answered yet. */
  private unanswered = 0;
  /**
   * A server's calls refused with NOSCRIPT, in order, until every call sent
   * before the refusals were known has answered; undefined the rest of the time.
   */
  private refused: HeldCall[] | undefined;
  /** The place, among the calls sent, of the first of `refused`. */
  private firstRefused = 0;
  /** Set when a call sent after a refused one ran: the refused ones then fail. */
  private overtaken = false;
  /** A server's calls made while refused ones wait to go again. */
  private held: HeldCall[] = [];

  constructor(
    private readonly client: Redis | Cluster,
    private readonly isCluster: boolean,
    /** The servers that hold the node's keys (a cluster's masters). */
    private readonly servers: () => Redis[],
  ) {}

  /** True when a server has no call unanswered or waiting (a cluster has no use for it). */
  get idle(): boolean {
    return this.unanswered === 0 && this.refused === undefined;
  }

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

  /** Why a call refused with NOSCRIPT fails. */
  private notRun(error: Error): Error {
    return (
      this.loadError ??
      new Error(
        `the node had not loaded the lock scripts (${error.message.split('\n')[0]}); they are loaded again for the next call`,
      )
    );
  }

  /** Runs one call (all its keys in one slot) by SHA. */
  readonly run: ScriptCall = (script, keys, args) => {
    if (this.isCluster) return this.runOnCluster(script, keys, args);
    if (!this.refused) return this.send(script, keys, args, false);
    return new Promise((resolve, reject) =>
      this.held.push({ script, keys, args, resolve, reject }),
    );
  };

  private send(
    script: LuaScript,
    keys: readonly string[],
    args: readonly (string | number)[],
    resent: boolean,
  ): Promise<unknown> {
    const server = this.client as Redis;
    this.loadOn(server);
    const sequence = ++this.sent;
    this.unanswered++;
    return server.evalsha(script.sha, keys.length, ...keys, ...args).then(
      (reply) => {
        this.answered(sequence, true);
        return reply;
      },
      (error: unknown) => {
        if (!isNoScript(error)) {
          // It may have run (a Lua error, a lost connection): as good as answered.
          this.answered(sequence, true);
          throw error;
        }
        if (resent) {
          this.answered(sequence, false);
          throw this.notRun(error);
        }
        // The cache was flushed: the call did not run. It waits for the calls sent before the
        // refusal was known, then goes again, after the scripts.
        if (!this.refused) {
          this.refused = [];
          this.firstRefused = sequence;
          this.loadedOn = undefined;
        }
        const refused = this.refused;
        return new Promise((resolve, reject) => {
          refused.push({ script, keys, args, resolve, reject, refusal: error });
          this.answered(sequence, false);
        });
      },
    );
  }

  /** A call's reply came; `ran`: the call ran (or may have), unlike one refused with NOSCRIPT. */
  private answered(sequence: number, ran: boolean): void {
    this.unanswered--;
    const refused = this.refused;
    if (!refused) return;
    // Sent after a refused call and not refused itself: it ran before that one would, sent again.
    if (ran && sequence > this.firstRefused) this.overtaken = true;
    if (this.unanswered === 0) this.sendAgain(refused);
  }

  /** Every call sent before the refusals answered: the refused calls go again, then the held ones. */
  private sendAgain(refused: readonly HeldCall[]): void {
    const { held, overtaken } = this;
    this.refused = undefined;
    this.held = [];
    this.overtaken = false;
    for (const call of refused) {
      if (overtaken) call.reject(this.notRun(call.refusal!));
      else this.send(call.script, call.keys, call.args, true).then(call.resolve, call.reject);
    }
    for (const call of held) {
      this.send(call.script, call.keys, call.args, false).then(call.resolve, call.reject);
    }
  }

  private runOnCluster(
    script: LuaScript,
    keys: readonly string[],
    args: readonly (string | number)[],
    resent = false,
  ): Promise<unknown> {
    const sequence = ++this.sent;
    return this.client
      .evalsha(script.sha, keys.length, ...keys, ...args)
      .catch((error: unknown) => {
        if (!isNoScript(error)) throw error;
        // A new master, or SCRIPT FLUSH: the call did not run. Loaded again, and re-sent only if
        // nothing left after it.
        this.loadEverywhere();
        if (!resent && sequence === this.sent) return this.runOnCluster(script, keys, args, true);
        throw this.notRun(error);
      });
  }
}
