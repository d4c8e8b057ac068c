import { grantParts, Lock, type LeaseGrant } from './lock.js';
import { LockOptionsError } from './lock-errors.js';
import type { LockNode } from './lock-node.js';
import type { AcquireOptions, TryAcquireOptions, UsingOptions } from './lock-options.js';
import type { LeaseReply, LeaseRequest } from './lease-attempt.js';
import { LeasePrimitive } from './lease-primitive.js';
import type { EngineContext } from './engine-context.js';
import { RW_ACQUIRE, RW_EXTEND, RW_RELEASE, RW_WRITEBACK } from './rw-lua.js';
import { inspectLeases } from './admin/lease-inspection.js';
import type { ReadWriteInspection } from './admin/lease-verdict.js';

/** How a read-write lock is held: shared by readers, or by one writer alone. */
export type LockMode = 'read' | 'write';

const MODES: Record<LockMode, 'r' | 'w'> = { read: 'r', write: 'w' };

/**
 * A hold on a read-write lock: a {@link Lock} (token, signal, extend,
 * release, `await using`) that also says how it is held.
 */
export class ReadWriteHold extends Lock {
  /** @internal Created by {@link ReadWriteLock} only. */
  constructor(
    owner: ReadWriteLock,
    readonly mode: LockMode,
    grant: LeaseGrant,
  ) {
    super(owner, ...grantParts(grant));
  }
}

type Reply = [granted: 0 | 1, value?: number];

/**
 * Many readers or one writer, over the engine's nodes with the lock's
 * quorum, validity, extension and fencing rules (docs/read-write-locks.md).
 *
 * Every holder, reader or writer, has its own lease on each node (an entry of
 * the resource's holders hash, `<keyPrefix>{<resource>}:rw`) and its own
 * extension; a reader that crashed holds writers off until its lease ends.
 * The nodes' line (`...:rw:q`) orders waiters by arrival: a waiting writer
 * is not overtaken by readers that came after it, and readers waiting behind
 * a writer go together once it is done.
 *
 * Tokens: a writer's token is above every token issued before it on the
 * resource; a reader's token is at least the token of the last write before
 * it and below the token of every write after it.
 *
 * @example
 * const catalogue = readWriteLock(engine, 'catalogue'); // LockService: locks.readWriteLock('catalogue')
 * await catalogue.using('read', () => render());
 * await catalogue.using('write', (hold) => importFeed(hold.token));
 */
export class ReadWriteLock extends LeasePrimitive {
  /** @internal Made by `readWriteLock()` (lease-parts.ts). */
  constructor(context: EngineContext, resource: string) {
    super(context, context.resourceName(resource), 'rw', {
      writeback: RW_WRITEBACK,
      extend: RW_EXTEND,
      release: RW_RELEASE,
    });
  }

  /** Waits for the lock in `mode` per the retry policy (LockTimeoutError when it stays busy). */
  async acquire(mode: LockMode, options?: AcquireOptions): Promise<ReadWriteHold> {
    return (await this.acquireLease(checkMode(mode), options)) as ReadWriteHold;
  }

  /** One attempt: the hold, or LockBusyError (with retryAfter) when the mode conflicts. */
  async tryAcquire(mode: LockMode, options?: TryAcquireOptions): Promise<ReadWriteHold> {
    return (await this.tryLease(checkMode(mode), options)) as ReadWriteHold;
  }

  /**
   * Runs `routine` under the lock in `mode`: acquires (waiting per the retry
   * policy), extends this holder's lease while it runs, always releases.
   */
  async using<T>(
    mode: LockMode,
    routine: (hold: ReadWriteHold) => T | Promise<T>,
    options?: UsingOptions,
  ): Promise<T> {
    return await this.usingLease(
      checkMode(mode),
      routine as (lock: Lock) => T | Promise<T>,
      options,
    );
  }

  /**
   * What the nodes hold for this lock now: each node's holders (mode, lease,
   * token) and line of waiters, and the verdict (held for reading or
   * writing, free, or unknown when too few nodes answer). A snapshot for
   * operators and health checks: acquire the lock to act on it.
   */
  async inspect(): Promise<ReadWriteInspection> {
    const { nodes, options, quorum } = this.context;
    const timeout = this.context.nodeTimeout(options.ttl) * 5;
    return (await inspectLeases(nodes, options.keyPrefix, this.name, quorum, timeout)).readWrite;
  }

  protected busyMessage(mode: string): string {
    return readWriteBusyMessage(this.name, mode);
  }

  protected async acquireCall(
    node: LockNode,
    mode: string,
    value: string,
    request: LeaseRequest,
    joinLine: boolean,
  ): Promise<LeaseReply> {
    const { keys, fencing } = this.fencingArgs(node);
    const args = [value, MODES[mode as LockMode], request.ttl, ...fencing];
    if (joinLine) args.push(request.waiter, request.arrival, request.lineLease);
    const reply = (await node.run(RW_ACQUIRE, keys, args)) as Reply;
    return reply[0] === 1 ? { granted: true, token: reply[1] } : { granted: false, wait: reply[1] };
  }

  /** A holders hash maps each holder's value to its entry. */
  protected holderValues(hash: Readonly<Record<string, string>>): string[] {
    return Object.keys(hash);
  }

  protected where(): [] {
    return [];
  }

  protected handle(mode: string, grant: LeaseGrant): Lock {
    return new ReadWriteHold(this, mode as LockMode, grant);
  }
}

/** A mode as given by a caller, or LockOptionsError. */
export function checkMode(mode: unknown): LockMode {
  if (mode === 'read' || mode === 'write') return mode;
  throw new LockOptionsError(
    `A read-write lock is taken in mode 'read' or 'write' (got ${typeof mode === 'string' ? `'${mode}'` : typeof mode}).`,
  );
}

/** The message of a first attempt's LockBusyError on a read-write lock. */
export function readWriteBusyMessage(name: string, mode: string): string {
  return mode === 'write'
    ? `'${name}' is held by readers or a writer, or a waiter came first; retry later, or acquire with a wait (retry options) instead of a single attempt.`
    : `'${name}' is held by a writer, or a writer waits ahead; retry later, or acquire with a wait (retry options) instead of a single attempt.`;
}
