/** What inspect and release read first: the lock of a name, and its read-write lock and semaphore. */
import {
  inspectLeases,
  judgeLock,
  type JudgedLock,
  type LeaseInspections,
  type LockEngine,
} from '../../engine/internal.js';
import { READ_TIMEOUT_MS } from './context.js';

export interface NameState extends LeaseInspections {
  readonly lock: JudgedLock;
}

/** `permits`: the semaphore's N when the caller knows it. */
export async function readName(
  engine: LockEngine,
  resource: string,
  permits?: number,
): Promise<NameState> {
  // The lock first: it checks the name, so a name no engine takes is a usage error here.
  const lock = judgeLock(await engine.inspect(resource), engine.quorum);
  const leases = await inspectLeases(
    engine.nodes,
    engine.options.keyPrefix,
    resource,
    engine.quorum,
    READ_TIMEOUT_MS,
    permits,
  );
  return { lock, ...leases };
}
