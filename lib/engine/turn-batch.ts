import { ReplyError } from 'ioredis';
import { BATCH, BATCHABLE, type LuaScript } from './lua-scripts.js';
import type { ScriptCall } from './script-loader.js';

/** A script call waiting in {@link LockNode.run} for the end of its turn of the event loop. */
interface PendingCall {
  readonly script: LuaScript;
  readonly keys: readonly string[];
  readonly args: readonly (string | number)[];
  resolve(reply: unknown): void;
  reject(error: unknown): void;
}

/** A call's failure in a {@link BATCH} reply: `{"err": message}`. */
function isErrorReply(reply: unknown): reply is { err: string } {
  return typeof reply === 'object' && reply !== null && !Array.isArray(reply);
}

/** Where each lock script stands in {@link BATCH} (Lua counts from 1). */
const BATCH_INDEX = new Map(BATCHABLE.map((script, i) => [script, i + 1]));

/** The most calls one BATCH command carries, to keep each script run short. */
const MAX_BATCH = 64;

/**
 * The script calls made on one server in the same turn of the event loop,
 * sent in order, each run of lock scripts among them as one {@link BATCH}
 * command. A turn, not a tick: requests that arrive on separate connections
 * (HTTP requests, each in an I/O callback of its own) are handled in one turn
 * when they arrive together, and their locks then share a command. They go
 * out in the turn's check phase (setImmediate), right after the I/O callbacks
 * that made them, never a timer's delay later.
 *
 * Every server batches. In paired rounds on one node (a loop of tryAcquire
 * and release, 10 rounds per cell, every engine warmed up first), batching
 * the turn against sending each call at once, four to a write: 1 caller
 * 1.00x, 4 callers 1.02x, 32 callers 1.11x (faster in every round).
 *
 * The engine's only node (see {@link sendsIdleCallsAtOnce}) sends a call at
 * once when it has nothing queued or awaiting an answer: that call cannot
 * join a batch anyway, unless another caller makes a call later in the same
 * turn, which then waits for the turn's end as usual. The turn's wait was
 * what a lone caller paid for nothing. Against waiting for the turn's end, in
 * three runs of the bench's paired rounds on one node (`bench/run.ts
 * --scenarios baseline --nodes 1`): 1 caller 1.00x, 1.02x and 1.04x, 4
 * callers 0.98x, 1.01x and 0.97x, 32 callers 1.08x, 1.01x and 1.05x, with
 * the cycle's median latency lower in five cells of six (0.11 against 0.12
 * ms alone, 0.17 against 0.18 ms with 4 callers). On several nodes it stays
 * off: a lone caller there gained within noise, while 4 callers on 3 and 5
 * nodes ran 0.79x and 0.81x as fast (their calls, no longer in step, went out
 * as two commands a turn), as when each turn's first call had been sent at
 * once.
 */
export class TurnBatch {
  /** Calls waiting for the end of the turn. */
  private pending: PendingCall[] = [];
  /** Commands sent and not answered yet; counted only where idle calls leave at once. */
  private unanswered = 0;
  /** Set on the engine's only node: a call that finds nothing queued or unanswered leaves at once. */
  sendsIdleCallsAtOnce = false;

  constructor(private readonly send: ScriptCall) {}

  /** Queues a call for the end of this turn, or sends it now (see {@link sendsIdleCallsAtOnce}). */
  run(
    script: LuaScript,
    keys: readonly string[],
    args: readonly (string | number)[],
  ): Promise<unknown> {
    if (this.sendsIdleCallsAtOnce && this.unanswered === 0 && this.pending.length === 0) {
      return this.sent(this.send(script, keys, args));
    }
    return new Promise((resolve, reject) => {
      if (this.pending.push({ script, keys, args, resolve, reject }) === 1) {
        setImmediate(this.flush);
      }
    });
  }

  /**
   * Sends the calls of one turn in their order: each run of consecutive lock
   * scripts (up to {@link MAX_BATCH}) as one BATCH command, a lone call or
   * any other script by itself. Also called before the connection closes, so
   * that the calls of the closing turn (a failed attempt's clean-up) go out
   * ahead of QUIT; the turn's own flush then finds nothing to send.
   * One command instead of one per call spares the node its per-command work
   * and the client a command object, a promise and a reply each.
   */
  readonly flush = (): void => {
    const calls = this.pending;
    if (calls.length === 0) return;
    this.pending = [];
    let i = 0;
    while (i < calls.length) {
      let end = i;
      while (end < calls.length && end - i < MAX_BATCH && BATCH_INDEX.has(calls[end].script)) end++;
      if (end - i < 2) {
        const call = calls[i++];
        this.sent(this.send(call.script, call.keys, call.args)).then(call.resolve, call.reject);
        continue;
      }
      this.runBatch(calls.slice(i, end));
      i = end;
    }
  };

  /** Counts a command as unanswered until its reply (or failure) comes, where that matters. */
  private sent(command: Promise<unknown>): Promise<unknown> {
    if (!this.sendsIdleCallsAtOnce) return command;
    this.unanswered++;
    command.then(this.answered, this.answered);
    return command;
  }

  private readonly answered = (): void => {
    this.unanswered--;
  };

  private runBatch(calls: readonly PendingCall[]): void {
    const keys: string[] = [];
    const list: [number, number, string[]][] = [];
    for (const call of calls) {
      for (const key of call.keys) keys.push(key);
      list.push([BATCH_INDEX.get(call.script)!, call.keys.length, call.args.map(String)]);
    }
    this.sent(this.send(BATCH, keys, [JSON.stringify(list)])).then(
      (encoded) => {
        let replies: unknown[];
        try {
          replies = JSON.parse(encoded as string) as unknown[];
        } catch (error) {
          for (const call of calls) call.reject(error);
          return;
        }
        calls.forEach((call, k) => {
          const reply = replies[k];
          if (isErrorReply(reply)) call.reject(new ReplyError(reply.err));
          else call.resolve(reply);
        });
      },
      (error: unknown) => {
        for (const call of calls) call.reject(error);
      },
    );
  }
}
