/**
 * LeaderElection in one process, on three real redis-server nodes: elections
 * on separate engines stand for separate instances (the multi-process
 * failures, kill -9 and SIGSTOP, are in scheduling-processes.spec.ts).
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import {
  LeaderElection,
  LeadershipEndedError,
  LockEngine,
  LockLostError,
  LockOptionsError,
  type LeaderElectionOptions,
  type LeaderTerm,
  type RetirementReason,
} from '../../lib/engine/index.js';
import { deferred } from '../support/latch.js';
import { quietLogger } from '../support/quiet-logger.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';

const redis = useRedisNodes(3);
const TTL = 600;

interface Instance {
  readonly engine: LockEngine;
  readonly election: LeaderElection;
  readonly logger: ReturnType<typeof quietLogger>;
  readonly elected: LeaderTerm[];
  readonly retired: { term: LeaderTerm; reason: RetirementReason; leaderAfter: boolean }[];
  /** Resolves once `count` terms of this instance have retired. */
  retirements(count: number): Promise<void>;
  /**
   * Resolves once this instance waits in the nodes' line: an attempt that
   * joined it (any after the first) was refused.
   */
  readonly inLine: Promise<void>;
}

let open: Instance[] = [];
let engines: LockEngine[] = [];

afterEach(async () => {
  await Promise.all(open.map((i) => i.election.close()));
  await Promise.all(engines.map((e) => e.close()));
  open = [];
  engines = [];
});

function engine(extra: Partial<ConstructorParameters<typeof LockEngine>[0]> = {}): LockEngine {
  const created = new LockEngine({
    nodes: redis.nodes.map((n) => n.url),
    ttl: TTL,
    checkNodes: false,
    logger: quietLogger(),
    ...extra,
  });
  engines.push(created);
  return created;
}

function instance(name: string, options: LeaderElectionOptions = {}): Instance {
  const logger = quietLogger();
  const own = engine({ logger });
  const elected: LeaderTerm[] = [];
  const retired: Instance['retired'] = [];
  const waiting: { count: number; resolve: () => void }[] = [];
  const election: LeaderElection = new LeaderElection(own, name, {
    onElected: (term) => void elected.push(term),
    onRetired: (term, reason) => {
      retired.push({ term, reason, leaderAfter: election.isLeader });
      for (const w of waiting) if (retired.length >= w.count) w.resolve();
    },
    ...options,
  });
  const retirements = (count: number) =>
    retired.length >= count
      ? Promise.resolve()
      : new Promise<void>((resolve) => waiting.push({ count, resolve }));
  const inLine = deferred<void>();
  own.on('contended', ({ attempt }) => {
    if (attempt >= 2) inLine.resolve();
  });
  const created = {
    engine: own,
    election,
    logger,
    elected,
    retired,
    retirements,
    inLine: inLine.promise,
  };
  open.push(created);
  return created;
}

/** The first of `instances` to be elected, with its term. */
async function firstLeader(instances: Instance[]): Promise<[Instance, LeaderTerm]> {
  return Promise.race(
    instances.map((i) =>
      i.election.whenElected().then((term) => [i, term] as [Instance, LeaderTerm]),
    ),
  );
}

describe('LeaderElection', () => {
  it('elects one instance of three; a step-down hands over to a waiting one within a round trip', async () => {
    const name = `leader:handover`;
    const instances = [instance(name), instance(name), instance(name)];
    const [leader, term] = await firstLeader(instances);
    expect(instances.filter((i) => i.election.isLeader)).toEqual([leader]);
    expect(leader.election.epoch).toBe(term.epoch);
    expect(term.epoch).toBeGreaterThan(0);
    expect(leader.elected).toEqual([term]);
    const inspection = await leader.engine.inspect(name);
    expect(inspection.holder).toBeDefined();

    const others = instances.filter((i) => i !== leader);
    await Promise.all(others.map((i) => i.inLine));
    const next = firstLeader(others);
    const started = performance.now();
    await leader.election.stepDown();
    const [successor, successorTerm] = await next;
    const handover = performance.now() - started;

    // Woken by the release, not by a retry after the lease: far below the 600 ms lease.
    expect(handover).toBeLessThan(TTL / 2);
    expect(successorTerm.epoch).toBeGreaterThan(term.epoch);
    expect(term.signal.aborted).toBe(true);
    expect(term.signal.reason).toBeInstanceOf(LeadershipEndedError);
    expect((term.signal.reason as LeadershipEndedError).reason).toBe('stepped-down');
    expect(leader.retired).toEqual([{ term, reason: 'stepped-down', leaderAfter: false }]);
    expect(instances.filter((i) => i.election.isLeader)).toEqual([successor]);
    // The one that stepped down contends again, behind the instance still waiting.
    expect(leader.election.closed).toBe(false);
  });

  it('a step-down hands over to an instance that just began to contend, not back to itself', async () => {
    const name = 'leader:starting';
    const a = instance(name);
    const term = await a.election.whenElected();
    // b starts while a steps down: its first attempts race the release and it has no place in
    // the nodes' line yet. The instance stepping down sits out long enough for it to ask again.
    const b = instance(name);
    const winner = Promise.race([
      b.election.whenElected().then(() => 'b'),
      a.retirements(1).then(() => a.election.whenElected().then(() => 'a')),
    ]);
    await a.election.stepDown();
    expect(await winner).toBe('b');
    expect(b.election.epoch).toBeGreaterThan(term.epoch);
    expect(a.election.isLeader).toBe(false);
    // a contends again once it sat out: it leads when b steps down.
    await a.inLine;
    const back = a.election.whenElected();
    await b.election.stepDown();
    expect((await back).epoch).toBeGreaterThan(b.elected[0]!.epoch);
  });

  it('keeps the lease renewed while it leads, past several leases', async () => {
    const name = 'leader:renewed';
    const [a, b] = [instance(name), instance(name)];
    const [leader, term] = await firstLeader([a, b]);
    const extended = deferred<void>();
    let extensions = 0;
    leader.engine.on('extended', () => {
      if (++extensions === 4) extended.resolve();
    });
    await extended.promise; // four renewals: about two leases of 600 ms
    expect(leader.election.isLeader).toBe(true);
    expect(leader.election.epoch).toBe(term.epoch);
    expect([a, b].filter((i) => i.election.isLeader)).toHaveLength(1);
    expect(leader.retired).toEqual([]);
  });

  it('close() steps down at once and stops contending', async () => {
    const name = 'leader:close';
    const [a, b] = [instance(name), instance(name)];
    const [leader, term] = await firstLeader([a, b]);
    const other = leader === a ? b : a;
    await other.inLine;
    const next = other.election.whenElected();
    const started = performance.now();
    await leader.election.close();
    const successor = await next;
    expect(performance.now() - started).toBeLessThan(TTL / 2);
    expect(successor.epoch).toBeGreaterThan(term.epoch);
    expect(leader.retired.map((r) => r.reason)).toEqual(['closed']);
    expect(leader.election.closed).toBe(true);
    await expect(leader.election.whenElected()).rejects.toBeInstanceOf(LeadershipEndedError);

    // Not contending any more: when the successor steps down, nobody takes over.
    await other.election.close();
    expect((await leader.engine.inspect(name)).holder).toBeUndefined();
  });

  it('a lease lost to another holder ends the term as lost, and the instance contends again', async () => {
    const name = 'leader:lost';
    const a = instance(name);
    const term = await a.election.whenElected();
    // Another value takes the key on every node (what a takeover after an expiry looks like):
    // the leader's next renewal finds it gone.
    await Promise.all(
      redis.nodes.map((node) => node.cli('SET', `lock:{${name}}`, 'usurper', 'PX', '60000')),
    );
    await a.retirements(1);
    expect(a.retired.map((r) => r.reason)).toEqual(['lost']);
    expect(a.election.isLeader).toBe(false);
    const reason = term.signal.reason as LeadershipEndedError;
    expect(reason.reason).toBe('lost');
    expect(reason.cause).toBeInstanceOf(LockLostError);

    // Contending again: elected once the key is cleared, with a newer epoch.
    const again = a.election.whenElected();
    const admin = engine();
    await admin.connect();
    expect(await admin.forceRelease(name)).toBe(3);
    expect((await again).epoch).toBeGreaterThan(term.epoch);
  });

  it('logs what a callback throws, and the term goes on', async () => {
    const a = instance('leader:callback-error', {
      onElected: () => {
        throw new Error('billing failed to start');
      },
    });
    const term = await a.election.whenElected();
    await new Promise((resolve) => setImmediate(resolve));
    expect(a.logger.errors).toEqual([
      "Leader election 'leader:callback-error': onElected failed: billing failed to start",
    ]);
    expect(a.election.isLeader).toBe(true);
    expect(term.signal.aborted).toBe(false);
  });

  it('refuses options it cannot work with, saying what to change', () => {
    const plain = engine();
    expect(() => new LeaderElection(engine({ fencing: false }), 'x')).toThrow(
      /needs fencing tokens for its epochs, but the engine was created with fencing: false\. Remove that option/,
    );
    expect(() => new LeaderElection(plain, ['a', 'b'] as unknown as string)).toThrow(
      LockOptionsError,
    );
    expect(() => new LeaderElection(plain, '')).toThrow(/cannot be used/);
    expect(() => new LeaderElection(plain, 'x', { ttl: 5 })).toThrow(/ttl must be a whole number/);
    expect(
      () => new LeaderElection(plain, 'x', { onElected: 'run' as unknown as () => void }),
    ).toThrow(/onElected of leader election 'x' must be a function/);
    // A misspelt callback would never run: refused, with the options it takes.
    expect(
      () => new LeaderElection(plain, 'x', { onElect: () => undefined } as LeaderElectionOptions),
    ).toThrow(
      "Leader election 'x' has no option 'onElect'; the options are: ttl, retry, onElected, onRetired.",
    );
  });
});
