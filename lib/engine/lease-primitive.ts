import { setTimeout as sleep } from 'node:timers/promises';
import { randomBytes } from 'node:crypto';
import { Lock, type LockOwner, type ReleaseResult } from './lock.js';
import {
  LockAbortedError,
  LockBusyError,
  LockClosingError,
  LockConfigurationError,
  type LockError,
  LockLostError,
  LockOptionsError,
  LockTimeoutError,
  LockUnavailableError,
} from './lock-errors.js';
import type { NodeResults } from './lock-events.js';
import type { LockNode } from './lock-node.js';
import type { LuaScript } from './lua-scripts.js';
import {
  checkMs,
  type AcquireOptions,
  type ResolvedEngineOptions,
  type ResolvedRetry,
  type RetryOptions,
  type UsingOptions,
} from './lock-options.js';
import { quorumRound, roundFailures, type RoundResult } from './quorum-round.js';
import type { ReleaseChannel } from './release-channel.js';
import { lineLease, retryDelay } from './retry-delay.js';
import type { Ticket, WaitQueues } from './wait-queue.js';

/**
 * What read-write locks and semaphores share with the engine that made them:
 * its nodes, options and timing rules, its restart watch, its waiters' queues
 * and release channel (wake-ups), and its shutdown. Built by the engine.
 */
export interface EngineParts {
  readonly nodes: readonly LockNode[];
  readonly quorum: number;
  readonly options: ResolvedEngineOptions;
  /** Checks a resource name as the engine does; returns it. */
  resourceName(resource: string): string;
  /** The lock key of a resource, `<keyPrefix>{<resource>}`. */
  lockKey(resource: string): string;
  /** The fence counter this node uses for a resource, and its TTL ('0': none). */
  counter(node: LockNode, lockKey: string): { readonly key: string; readonly ttl: number };
  nodeTimeout(ttl: number): number;
  drift(ttl: number): number;
  /** Now, in epoch ms on the nodes' clock: a waiter's place in the nodes' lines. */
  arrival(): number;
  /** Why node i's grants must not count now (a restart without persistence), or undefined. */
  excluded(i: number): string | undefined;
  /** While node i's restart is being checked: resolves once known. */
  pending(i: number): Promise<unknown> | undefined;
  readonly queues: WaitQueues;
  readonly channel: ReleaseChannel | undefined;
  readonly notify: '1' | '0';
  readonly sender: string;
  /** Aborted once the engine drains or closes. */
  readonly closing: AbortSignal;
  isClosed(): boolean;
  retryPolicy(retry: RetryOptions): ResolvedRetry;
  /** Reports a failed acquisition (events; the Nest layer tags the error). */
  failed(
    request: { readonly resources: readonly string[]; readonly started: number; waiting: boolean },
    attempts: number,
    error: LockError,
    nodes?: NodeResults,
  ): LockError;
}

/** One node's answer to an acquisition, in a shape common to both primitives. */
export interface LeaseReply {
  readonly granted: boolean;
  /** Fencing token, when granted with fencing on. */
  readonly token?: number;
  /** A semaphore's permit slot, when granted. */
  readonly slot?: number;
  /** When refused: ms until the holders in the way are gone; -3: only the line is in the way. */
  readonly wait?: number;
}

/** One acquisition as the loop tracks it. */
export interface LeaseRequest {
  readonly resources: readonly string[];
  readonly ttl: number;
  readonly nodeTimeout: number;
  readonly drift: number;
  readonly retry: ResolvedRetry;
  readonly waitTimeout: number;
  readonly unavailableTimeout: number;
  readonly signal: AbortSignal | undefined;
  readonly started: number;
  waiting: boolean;
  readonly arrival: number;
  readonly lineLease: number;
  /** Names this acquisition in the nodes' lines: the value of its first attempt. */
  waiter: string;
  inLine: boolean;
  /** A semaphore's preferred slot for the next attempt, learnt from a split vote. */
  hint?: number;
  /** The caller's signal joined with the engine's shutdown, made once the acquisition waits. */
  waitSignal?: AbortSignal;
  /** Split votes so far: only the first is retried at once. */
  splits?: number;
}

const CALL_OPTIONS = new Set([
  'ttl',
  'waitTimeout',
  'unavailableTimeout',
  'retry',
  'signal',
  'autoExtend',
  'onReleased',
]);

/** As the engine's: a new fence counter starts at the wall clock in ms times this. */
const FENCE_SEED_SCALE = 1024;

/** A semaphore permit's slot; undefined for other holdings. */
const slotOf = (lock: Lock): number | undefined =>
  'slot' in lock && typeof lock.slot === 'number' ? lock.slot : undefined;

const SINGLE_ATTEMPT: RetryOptions = Object.freeze({ attempts: 0 });

/** A lease's identity on the nodes: 128 random bits. */
export const leaseValue = (): string => randomBytes(16).toString('base64url');

const counts = (round: RoundResult<unknown>): NodeResults => ({
  granted: round.yes,
  denied: round.no,
  failed: round.failed,
});

/**
 * The acquisition loop, extension and release shared by read-write locks and
 * semaphores: a lease on each node (an entry of the resource's holders hash,
 * not a key of its own), granted by a quorum within the same validity
 * arithmetic as a lock (`ttl - drift` from the start of the attempt), fencing
 * tokens settled as a lock's are (the highest among the granting nodes, written
 * back where they differ), waits woken by releases through the engine's
 * channel, and automatic extension for `using()`.
 *
 * The handles are plain {@link Lock}s whose owner is this object: `token`,
 * `signal`, `extend()`, `release()` and `await using` work as for a lock.
 */
export abstract class LeasePrimitive implements LockOwner {
  /** The resource's lock key, `<keyPrefix>{<name>}`: every key below shares its hash tag. */
  protected readonly lockKey: string;
  /** The holders hash; releases publish on its channel, which wakes the waiters. */
  protected readonly channelKey: string;
  /** The nodes' line of waiters. */
  protected readonly lineKey: string;

  constructor(
    protected readonly parts: EngineParts,
    /** What errors name: the resource, checked as a lock's. */
    readonly name: string,
    suffix: string,
    private readonly scripts: {
      readonly writeback: LuaScript;
      readonly extend: LuaScript;
      readonly release: LuaScript;
    },
  ) {
    this.lockKey = parts.lockKey(name);
    this.channelKey = `${this.lockKey}:${suffix}`;
    this.lineKey = `${this.channelKey}:q`;
  }

  /** One node's acquisition call (see {@link fencingArgs} for the shared part). */
  protected abstract acquireCall(
    node: LockNode,
    kind: string,
    value: string,
    request: LeaseRequest,
    joinLine: boolean,
  ): Promise<LeaseReply>;
  /** What identifies a holding on a node besides its value (a semaphore's slot). */
  protected abstract where(slot: number | undefined): (string | number)[];
  /** Makes the handle of a grant. */
  protected abstract handle(
    kind: string,
    value: string,
    tokens: readonly number[],
    ttl: number,
    validUntil: number,
    slot: number | undefined,
  ): Lock;

  /**
   * KEYS and ARGV every acquisition script starts with: the holders hash, the
   * line and the node's fence counter; then fencing '1' | '0', the seed of a
   * new counter and the counter's TTL.
   */
  protected fencingArgs(node: LockNode): {
    keys: string[];
    fencing: (string | number)[];
  } {
    const { fencing, fenceCounterTtl } = this.parts.options;
    const counter = this.parts.counter(node, this.lockKey);
    return {
      keys: [this.channelKey, this.lineKey, counter.key],
      fencing: [
        fencing ? '1' : '0',
        fencing && fenceCounterTtl > 0 ? Date.now() * FENCE_SEED_SCALE : 0,
        counter.ttl,
      ],
    };
  }

  private writebackCall(node: LockNode, value: string, token: number, slot: number | undefined) {
    const counter = this.parts.counter(node, this.lockKey);
    return node.run(
      this.scripts.writeback,
      [this.channelKey, counter.key],
      [value, counter.ttl, token, ...this.where(slot)],
    );
  }

  private extendCall(node: LockNode, lock: Lock, ttl: number) {
    return node.run(
      this.scripts.extend,
      [this.channelKey],
      [lock.value, ttl, ...this.where(slotOf(lock))],
    );
  }

  private releaseCall(node: LockNode, value: string) {
    // A cluster's message stays on the key's shard (SPUBLISH), as the plain lock's does.
    const { notify } = this.parts;
    return node.run(
      this.scripts.release,
      [this.channelKey, this.lineKey],
      [value, node.topology === 'cluster' && notify === '1' ? 's' : notify, this.parts.sender],
    );
  }

  /** Waits per the retry policy; throws LockTimeoutError when it stays busy. */
  protected async acquireLease(kind: string, options: AcquireOptions = {}): Promise<Lock> {
    const request = this.request(options);
    const deadline = request.started + request.waitTimeout;
    let ticket: Ticket | undefined;
    let unavailableSince: number | undefined;
    let granted: Lock | undefined;
    try {
      for (let attempt = 1; ; attempt++) {
        ticket?.attempting();
        let outcome: Lock | Refusal;
        try {
          outcome = await this.attempt(kind, request);
        } catch (error) {
          throw this.parts.failed(request, attempt, error as LockError);
        }
        if (outcome instanceof Lock) {
          if (this.parts.closing.aborted) {
            await outcome.release();
            throw this.parts.failed(request, attempt, new LockClosingError(request.resources));
          }
          granted = outcome;
          return outcome;
        }
        const now = performance.now();
        if (outcome.busy) unavailableSince = undefined;
        else unavailableSince ??= now;
        const outage =
          unavailableSince === undefined
            ? Infinity
            : unavailableSince + request.unavailableTimeout - now;
        const nodes = counts(outcome.round);
        if (outage <= 0) throw this.parts.failed(request, attempt, outcome.error(), nodes);
        if (attempt > request.retry.attempts || now >= deadline) {
          if (!outcome.busy) throw this.parts.failed(request, attempt, outcome.error(), nodes);
          const error =
            attempt === 1
              ? new LockBusyError(request.resources, outcome.retryAfter, this.busyMessage(kind))
              : new LockTimeoutError(
                  request.resources,
                  outcome.retryAfter,
                  attempt,
                  now - request.started,
                );
          throw this.parts.failed(request, attempt, error, nodes);
        }
        let delay = retryDelay(request.retry, attempt);
        // Holders that crashed are gone when their leases end: no need to sleep past that.
        if (outcome.retryAfter !== undefined) delay = Math.min(delay, outcome.retryAfter + 1);
        // Only the line was in the way (we just took our place in it), or a split vote taught
        // us a slot to ask for: ask again at once.
        if (outcome.again) delay = 0;
        request.waiting = true;
        if (!outcome.busy || delay === 0) {
          await this.pause(Math.min(delay, deadline - now, outage), request, attempt);
          continue;
        }
        if (!ticket) {
          // Its own queue: any release heard on the key wakes it (readers and permits can be
          // admitted several at once, so waiters of this process do not wait behind each other).
          ticket = this.parts.queues.join(
            `${this.channelKey}\n${request.waiter}`,
            [this.channelKey],
            request.arrival,
          );
          await this.parts.channel?.subscribe([this.channelKey], request.nodeTimeout);
          // Ask again at once, now listening: this attempt takes a place in the nodes' line, and
          // a release that came before the subscription was in place is not missed.
          continue;
        }
        try {
          await ticket.wait(delay, deadline, this.waitSignal(request));
        } catch {
          throw this.parts.failed(request, attempt, this.stoppedWaiting(request));
        }
      }
    } finally {
      if (ticket) {
        ticket.leave(granted !== undefined);
        this.parts.channel?.unsubscribe([this.channelKey]);
      }
      // Granted or not, a place left in a node's line (one that did not grant, or answered late)
      // would rank ahead of later waiters there until its lease ran out.
      if (request.inLine) this.leaveLines(request);
    }
  }

  protected tryLease(kind: string, options: Omit<AcquireOptions, 'retry' | 'waitTimeout'> = {}) {
    return this.acquireLease(kind, { ...options, retry: SINGLE_ATTEMPT });
  }

  protected async usingLease<T>(
    kind: string,
    routine: (lock: Lock) => T | Promise<T>,
    options: UsingOptions = {},
  ): Promise<T> {
    const lock = await this.acquireLease(kind, options);
    if (options.autoExtend !== false) this.keepExtended(lock);
    try {
      return await routine(lock);
    } finally {
      const result = await lock.release();
      options.onReleased?.(result);
    }
  }

  /** The message of a first attempt's LockBusyError, in this primitive's words. */
  protected abstract busyMessage(kind: string): string;

  private async attempt(kind: string, request: LeaseRequest): Promise<Lock | Refusal> {
    if (this.parts.isClosed()) {
      throw new LockOptionsError('The lock engine is closed; nothing can be acquired with it.');
    }
    if (this.parts.closing.aborted) throw new LockClosingError(request.resources);
    if (request.signal?.aborted)
      throw new LockAbortedError(request.resources, request.signal.reason);
    const value = leaseValue();
    const start = performance.now();
    const validUntil = start + request.ttl - request.drift;
    if (request.waiter === '') request.waiter = value;
    const joinLine = request.waiting && request.lineLease > 0;
    const { fencing } = this.parts.options;
    const round = await this.grantRound((node, i) => {
      const send = async () => {
        const reply = await this.acquireCall(node, kind, value, request, joinLine);
        if (!reply.granted) return reply;
        const excluded = this.parts.excluded(i);
        if (excluded !== undefined)
          throw new Error(`granted, but not counted toward the quorum: ${excluded}`);
        if (fencing && typeof reply.token !== 'number')
          throw new Error('granted, but without a fencing token; not counted toward the quorum');
        return reply;
      };
      const checking = this.parts.pending(i);
      return checking ? checking.then(send) : send();
    }, request.nodeTimeout);
    // Only the attempt that first took a place in the line asks again at once (see refusal()).
    const joinedNow = joinLine && !request.inLine;
    if (joinLine) request.inLine = true;
    // The slot a quorum granted (a read-write lock has none: every grant agrees).
    const bySlot = new Map<number | undefined, number[]>();
    round.replies.forEach((reply, i) => {
      if (!reply?.granted) return;
      const list = bySlot.get(reply.slot) ?? [];
      list.push(i);
      bySlot.set(reply.slot, list);
    });
    let best: [number | undefined, number[]] | undefined;
    for (const entry of bySlot) if (!best || entry[1].length > best[1].length) best = entry;
    if (best && best[1].length >= this.parts.quorum) {
      const [slot, granting] = best;
      let token: number | undefined;
      try {
        token = fencing ? await this.settle(round, granting, request, value, slot, validUntil) : 0;
      } catch (error) {
        this.cleanUp(value);
        throw error;
      }
      if (token !== undefined && performance.now() < validUntil) {
        // Nodes that granted our value another slot (a split vote) give it back; a late grant
        // of another slot expires unextended, or goes with our release.
        if (bySlot.size > 1) {
          for (const [other, nodes] of bySlot) {
            if (other === slot) continue;
            for (const i of nodes)
              this.releaseCall(this.parts.nodes[i], value).catch(() => undefined);
          }
        }
        return this.handle(kind, value, fencing ? [token] : [], request.ttl, validUntil, slot);
      }
    }
    // Nothing to take back where every node answered no; a node that granted, failed or did
    // not answer may hold our value (a late grant), and gets a release after its acquisition.
    if (round.yes > 0 || round.failed > 0 || round.no < this.parts.nodes.length)
      this.cleanUp(value);
    const split = bySlot.size > 1;
    if (split) {
      request.splits = (request.splits ?? 0) + 1;
      // The slot most nodes offered; among equals the highest: a node offers its lowest free
      // slot, so one that offered a higher slot has the lower ones taken.
      let hint: [number, number] | undefined;
      for (const [offered, nodes] of bySlot) {
        if (offered === undefined) continue;
        if (!hint || nodes.length > hint[1] || (nodes.length === hint[1] && offered > hint[0]))
          hint = [offered, nodes.length];
      }
      request.hint = hint?.[0];
    }
    return this.refusal(round, request, split, joinedNow);
  }

  /**
   * {@link quorumRound} for grants that must agree on a slot: it settles as
   * soon as one slot has a quorum of grants, or no slot can get one any more
   * (counting the nodes still pending), or at the timeout. A plain quorum of
   * grants would settle on two slots' grants and lose the third node's vote.
   * A read-write lock's grants have no slot: the same rule as a lock's round.
   */
  private grantRound(
    send: (node: LockNode, index: number) => Promise<LeaseReply>,
    timeoutMs: number,
  ): Promise<RoundResult<LeaseReply>> {
    const { nodes, quorum } = this.parts;
    const count = nodes.length;
    const result: RoundResult<LeaseReply> = {
      replies: new Array<LeaseReply | undefined>(count),
      errors: new Array<Error | undefined>(count),
      yes: 0,
      no: 0,
      failed: 0,
    };
    const perSlot = new Map<number | undefined, number>();
    let best = 0;
    return new Promise((resolve) => {
      let settled = false;
      let timer: NodeJS.Timeout | undefined;
      const finish = () => {
        settled = true;
        clearTimeout(timer);
        resolve(result);
      };
      const decide = () => {
        const pending = count - result.yes - result.no - result.failed;
        if (best >= quorum || best + pending < quorum) finish();
      };
      for (let i = 0; i < count; i++) {
        send(nodes[i], i).then(
          (reply) => {
            if (settled) return;
            result.replies[i] = reply;
            if (reply.granted) {
              result.yes++;
              const votes = (perSlot.get(reply.slot) ?? 0) + 1;
              perSlot.set(reply.slot, votes);
              best = Math.max(best, votes);
            } else {
              result.no++;
            }
            decide();
          },
          (error: unknown) => {
            if (settled) return;
            result.errors[i] = error instanceof Error ? error : new Error(String(error));
            result.failed++;
            decide();
          },
        );
      }
      // As quorumRound: the clock starts once the commands have left (end of this turn).
      setImmediate(() => {
        if (settled) return;
        timer = setTimeout(() => {
          if (settled) return;
          for (let i = 0; i < count; i++) {
            if (result.replies[i] === undefined && result.errors[i] === undefined) {
              result.errors[i] = new Error(`no answer within ${Math.round(timeoutMs)} ms`);
              result.failed++;
            }
          }
          finish();
        }, timeoutMs);
      });
    });
  }

  /**
   * The token of a grant: the highest among the granting nodes, final at once
   * when they agree, else written back (where our lease still stands) to
   * enough of the others to stand on a quorum. Undefined when that fails.
   */
  private async settle(
    round: RoundResult<LeaseReply>,
    granting: readonly number[],
    request: LeaseRequest,
    value: string,
    slot: number | undefined,
    validUntil: number,
  ): Promise<number | undefined> {
    let token = 0;
    for (const i of granting) token = Math.max(token, round.replies[i]!.token!);
    if (!Number.isSafeInteger(token)) {
      throw new LockConfigurationError(
        `The fence counter of '${this.name}' passed 2^53 - 1, beyond what a JavaScript number holds exactly. ` +
          'Delete its fence counters on every node (with fenceCounterTtl set, a new counter starts from the clock), or use another keyPrefix.',
      );
    }
    const behind = granting.filter((i) => round.replies[i]!.token !== token);
    const needed = this.parts.quorum - (granting.length - behind.length);
    if (needed <= 0) return token;
    const left = validUntil - performance.now();
    if (left <= 0 || behind.length < needed) return undefined;
    const nodes = behind.map((i) => this.parts.nodes[i]);
    const writeback = await quorumRound(
      nodes,
      (node) => this.writebackCall(node, value, token, slot),
      (reply) => reply === 1,
      needed,
      Math.min(request.nodeTimeout, left),
    );
    return writeback.yes >= needed ? token : undefined;
  }

  private refusal(
    round: RoundResult<LeaseReply>,
    request: LeaseRequest,
    split: boolean,
    joinedNow: boolean,
  ): Refusal {
    const { nodes, quorum } = this.parts;
    const error = () =>
      new LockUnavailableError(
        request.resources,
        round.yes >= quorum
          ? [
              {
                node: 'quorum',
                error: new Error(
                  'granted, but the grant or its fencing round ended too late to leave any validity (nodes too slow)',
                ),
              },
            ]
          : roundFailures(nodes, round.errors),
        quorum,
        nodes.length,
      );
    // Grants of different slots: contention, not an outage. The first split is asked again at
    // once (with the slot most nodes offered as the hint); later ones wait as a busy lock does,
    // so that waiters whose nodes have no free slot in common do not spin.
    if (split)
      return { busy: true, retryAfter: undefined, again: request.splits === 1, error, round };
    if (round.failed > nodes.length - quorum || round.no === 0)
      return { busy: false, retryAfter: undefined, again: false, error, round };
    const waits: number[] = [];
    for (const reply of round.replies) if (reply && !reply.granted) waits.push(reply.wait ?? -1);
    waits.sort((a, b) => a - b);
    const wait = waits[Math.min(Math.max(0, quorum - round.yes - 1), waits.length - 1)];
    return {
      busy: true,
      retryAfter: wait !== undefined && wait >= 0 ? wait : undefined,
      // Free but for earlier waiters, and this attempt just took its place among them by arrival:
      // it may be first itself now, so it asks again at once. Later refusals of that kind wait
      // for a release (asking at once again would spin while the waiters ahead hold their turn).
      again: joinedNow && round.replies.every((r) => !r || r.granted || r.wait === -3),
      error,
      round,
    };
  }

  /** Best-effort release of a failed attempt on every node, including those that did not answer. */
  private cleanUp(value: string): void {
    for (const node of this.parts.nodes) this.releaseCall(node, value).catch(() => undefined);
  }

  private leaveLines(request: LeaseRequest): void {
    for (const node of this.parts.nodes)
      node.client.hdel(this.lineKey, request.waiter).catch(() => undefined);
  }

  private async pause(ms: number, request: LeaseRequest, attempts: number): Promise<void> {
    if (ms <= 0) return;
    try {
      await sleep(ms, undefined, { signal: this.waitSignal(request) });
    } catch {
      throw this.parts.failed(request, attempts, this.stoppedWaiting(request));
    }
  }

  private waitSignal(request: LeaseRequest): AbortSignal {
    // A signal of the request's own: many waiters listening on the engine's shutdown signal
    // itself would pass its listener limit (a warning), while AbortSignal.any holds it weakly.
    request.waitSignal ??= AbortSignal.any(
      request.signal ? [request.signal, this.parts.closing] : [this.parts.closing],
    );
    return request.waitSignal;
  }

  private stoppedWaiting(request: LeaseRequest): LockError {
    return this.parts.closing.aborted
      ? new LockClosingError(request.resources)
      : new LockAbortedError(request.resources, request.signal?.reason);
  }

  private request(options: UsingOptions): LeaseRequest {
    if (options === null || typeof options !== 'object') {
      throw new LockOptionsError(
        `Options must be an object such as { ttl: 5000 } (got ${String(options)}).`,
      );
    }
    for (const key in options) {
      if (!CALL_OPTIONS.has(key)) {
        throw new LockOptionsError(
          `There is no option '${key}'; a call takes ${[...CALL_OPTIONS].join(', ')}.`,
        );
      }
    }
    if (options.signal !== undefined && !(options.signal instanceof AbortSignal)) {
      throw new LockOptionsError('signal must be an AbortSignal (from an AbortController).');
    }
    const { parts } = this;
    const defaults = parts.options;
    const ttl = options.ttl === undefined ? defaults.ttl : checkMs('ttl', options.ttl, 10);
    const retry = options.retry === undefined ? defaults.retry : parts.retryPolicy(options.retry);
    return {
      resources: [this.name],
      ttl,
      nodeTimeout: parts.nodeTimeout(ttl),
      drift: parts.drift(ttl),
      retry,
      waitTimeout:
        options.waitTimeout === undefined
          ? defaults.waitTimeout
          : checkMs('waitTimeout', options.waitTimeout, 0),
      unavailableTimeout:
        options.unavailableTimeout === undefined
          ? defaults.unavailableTimeout
          : checkMs('unavailableTimeout', options.unavailableTimeout, 0),
      signal: options.signal,
      started: performance.now(),
      waiting: false,
      arrival: parts.arrival(),
      lineLease: retry.attempts > 0 ? lineLease(retry) : 0,
      waiter: '',
      inLine: false,
    };
  }

  /**
   * Renews the lease on every node where this holder's entry is live, counted
   * only when a quorum renews it before the current validity ends. Throws
   * LockLostError when the entry is gone (and aborts the signal), or
   * LockUnavailableError when too few nodes answered.
   */
  async extend(lock: Lock, ttl: number = lock.ttl, timeout?: number): Promise<Lock> {
    if (ttl !== lock.ttl) checkMs('ttl', ttl, 10);
    if (lock.isReleased) throw new LockLostError(lock.resources, 'it was already released');
    const start = performance.now();
    const left = lock.validUntil - start;
    if (left <= 0) {
      lock.lost('its lease ran out before the extension');
      throw new LockLostError(lock.resources, 'its lease ran out before the extension');
    }
    const { nodes, quorum } = this.parts;
    const round = await quorumRound(
      nodes,
      (node) => this.extendCall(node, lock, ttl),
      (reply) => reply === 1,
      quorum,
      Math.min(timeout ?? this.parts.nodeTimeout(ttl), left),
    );
    const renewed = start + ttl - this.parts.drift(ttl);
    if (round.yes >= quorum && performance.now() < lock.validUntil) {
      lock.renewed(renewed);
      return lock;
    }
    // Nodes that renewed without answering in time may now end the lease sooner than counted.
    if (renewed < lock.validUntil) lock.renewed(renewed);
    if (round.no > nodes.length - quorum) {
      const why = 'the nodes no longer hold it (its lease expired)';
      lock.lost(why);
      throw new LockLostError(lock.resources, why);
    }
    throw new LockUnavailableError(
      lock.resources,
      roundFailures(nodes, round.errors),
      quorum,
      nodes.length,
      'extend',
    );
  }

  /** @internal Use `lock.release()`. */
  async releaseOnNodes(lock: Lock): Promise<ReleaseResult> {
    if (lock.validUntil <= performance.now()) lock.lost('its lease ran out before it was released');
    lock.released();
    const { nodes, quorum } = this.parts;
    const releasing = quorumRound(
      nodes,
      (node) => this.releaseCall(node, lock.value),
      (reply) => reply === 1,
      quorum,
      this.parts.nodeTimeout(lock.ttl),
    );
    // This process's own waiters: the channel skips our own messages.
    this.parts.queues.released(this.channelKey);
    const round = await releasing;
    return {
      released: round.yes >= quorum,
      nodesReleased: round.yes,
      nodesNotHeld: round.no,
      nodesPending: nodes.length - round.yes - round.no - round.failed,
      failures: roundFailures(nodes, round.errors),
    };
  }

  /** @internal */
  lockLost(): void {}

  /** Keeps the lease renewed until released or lost; the signal aborts before the lease ends. */
  protected keepExtended(lock: Lock): void {
    const { ttl } = lock;
    const margin = Math.max(2, Math.ceil(ttl * 0.02));
    const threshold = this.parts.options.extendThreshold;
    let timer: NodeJS.Timeout | undefined;
    let stopped = false;
    const next = (delay: number) => {
      if (stopped) return;
      timer = setTimeout(renew, Math.max(0, delay));
      timer.unref();
    };
    const renew = async () => {
      const budget = lock.validUntil - margin - performance.now();
      if (budget <= 0) return lock.lost('it could not be extended before its lease ran out');
      try {
        await this.extend(lock, ttl, budget);
        next(lock.validUntil - performance.now() - ttl * threshold);
      } catch (error) {
        if (stopped || error instanceof LockLostError) return;
        const left = lock.validUntil - margin - performance.now();
        if (left <= 0)
          lock.lost(
            `it could not be extended before its lease ran out (${(error as Error).message})`,
          );
        else next(Math.min(left / 4, retryDelay(this.parts.options.retry, 1)));
      }
    };
    lock.stopExtending = () => {
      stopped = true;
      clearTimeout(timer);
    };
    void lock.signal;
    next(lock.validUntil - performance.now() - ttl * threshold);
  }
}

interface Refusal {
  readonly busy: boolean;
  readonly retryAfter: number | undefined;
  /** Ask again at once (see refusal()). */
  readonly again: boolean;
  readonly error: () => LockUnavailableError;
  readonly round: RoundResult<LeaseReply>;
}
