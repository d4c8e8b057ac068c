import type { Lock, LockMode, ResolvedEngineOptions } from '../engine/internal.js';
import type { WaitLine } from './memory-line.js';

/** One grant, as {@link InMemoryLockEngine.grants} reports it. */
export interface LockGrant {
  /** The locked resources, in the order asked for. */
  readonly resources: readonly string[];
  /** One fencing token per resource; empty when fencing is off. */
  readonly tokens: readonly number[];
  /** The first resource's token. */
  readonly token: number | undefined;
  /** The lease asked for, in ms. */
  readonly ttl: number;
  /** `'engine'`: taken through this engine; `'elsewhere'`: through {@link InMemoryLockEngine.hold}. */
  readonly by: 'engine' | 'elsewhere';
  /** `performance.now()` at the grant (faked along with the timers under Jest's fake timers). */
  readonly at: number;
}

/** A holder of an in-memory read-write lock or semaphore (the same on every node). */
export interface MemoryHolding {
  readonly value: string;
  readonly mode?: LockMode;
  readonly slot?: number;
  /** `performance.now()` when its lease ends. */
  expiresAt: number;
  readonly token: number;
}

/** A simulated Redis node: lock keys, fence counters, and whether it answers. */
export interface MemoryNode {
  readonly label: string;
  readonly keys: Map<string, { value: string; expiresAt: number }>;
  readonly fences: Map<string, number>;
  /** Set while the node is failed by the test: what every command gets. */
  down: Error | undefined;
}

/**
 * What an in-memory engine holds, shared by its parts (the engine's methods,
 * the nodes, the line, the test hooks).
 */
export interface MemoryState {
  readonly options: ResolvedEngineOptions;
  readonly nodes: readonly MemoryNode[];
  /** floor(n / 2) + 1 */
  readonly quorum: number;
  readonly line: WaitLine;
  /** This engine's locks, by lock key, while they hold. */
  readonly locks: Map<string, Lock>;
  /** Every grant, oldest first. */
  readonly history: LockGrant[];
  /** The holders of read-write locks and semaphores, by their key. */
  readonly leases: Map<string, MemoryHolding[]>;
  /** Their fence counters, by the same key. */
  readonly leaseFences: Map<string, number>;
  /** Set by close(): acquisitions fail until reset(). */
  closed: boolean;
}
