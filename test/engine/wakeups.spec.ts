import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import {
  LockAbortedError,
  LockBusyError,
  LockEngine,
  LockTimeoutError,
  type Lock,
} from '../../lib/engine/index.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';
import { engineReady } from '../support/engine-ready.js';
import { nextLockEvent, timedHandOff } from '../support/lock-events.js';
import { quietLogger } from '../support/quiet-logger.js';
import { ReleaseChannel } from '../../lib/engine/release-channel.js';

const redis = useRedisNodes(3);
const unique = (name: string) => `${name}:${randomUUID()}`;
/** A retry delay so long that only a wake-up can explain a fast hand-off. */
const SLOW_POLLING = { delay: 5000, factor: 1, maxDelay: 5000, jitter: 0 };

describe('waiters are woken when a lock is released', () => {
  const engines: LockEngine[] = [];
  const engine = async (options: { releaseNotifications?: boolean } = {}) => {
    const created = new LockEngine({
      nodes: redis.nodes.map((n) => n.url),
      logger: quietLogger(),
      ...options,
    });
    await created.connect();
    engines.push(created);
    return created;
  };
  let holder: LockEngine;
  beforeAll(async () => {
    holder = await engine();
  });
  afterAll(async () => {
    await Promise.all(engines.map((e) => e.close()));
  });

  it('wakes a waiter of another process (engine) through the release message', async () => {
    const waiter = await engine();
    const resource = unique('remote');
    const lock = await holder.acquire(resource);
    const { next, ms } = await timedHandOff(lock, waiter, resource, SLOW_POLLING);
    expect(ms).toBeLessThan(1000);
    await next.release();
  });

  it('waits in line for the release that names it, not asking again at its shortest delay meanwhile', async () => {
    const waiter = await engine();
    const resource = unique('patient');
    const lock = await holder.acquire(resource);
    // 10 ms between attempts, up to 5 s: a waiter that polled would ask about 30 times below.
    const retry = { delay: 10, factor: 1, maxDelay: 5000, jitter: 0 };
    let refusals = 0;
    const count = (event: { resources: readonly string[] }) => {
      if (event.resources[0] === resource) refusals++;
    };
    waiter.on('contended', count);
    // Its first attempt took its place in line; not yet listening then, it asked once more.
    const inLine = nextLockEvent(waiter, 'contended', resource, 2);
    const waiting = waiter.acquire(resource, { retry });
    await inLine;
    // Time passing is the point: the lock stays held, and a waiter that polled would be refused.
    await sleep(300);
    const whileHeld = refusals;
    await lock.release();
    const next = await waiting;
    waiter.off('contended', count);
    expect(whileHeld).toBe(2);
    expect(refusals).toBe(2);
    await next.release();
  });

  it('without release notifications the same waiter sleeps its retry delay (the control)', async () => {
    const silentHolder = await engine({ releaseNotifications: false });
    const waiter = await engine({ releaseNotifications: false });
    const resource = unique('silent');
    const lock = await silentHolder.acquire(resource);
    // After the second refusal: a waiter that cannot hear releases asks again at once after its
    // first (one may have gone unheard); a release before that one would be taken at once, with
    // no retry delay to show.
    const retry = { ...SLOW_POLLING, delay: 1500, maxDelay: 1500 };
    const { next, ms } = await timedHandOff(lock, waiter, resource, retry, 2);
    expect(ms).toBeGreaterThan(1000);
    await next.release();
  });

  it('hands the lock to this process’s waiters first come, first served', async () => {
    const resource = unique('fifo');
    const first = await holder.acquire(resource);
    const order: number[] = [];
    const take = (i: number) =>
      holder.acquire(resource, { retry: SLOW_POLLING }).then(async (lock: Lock) => {
        order.push(i);
        await lock.release();
      });
    const contended = nextLockEvent(holder, 'contended', resource);
    const waiters = [take(0)];
    await contended;
    // The others find the line already formed and join it in the order they ask.
    for (let i = 1; i < 5; i++) waiters.push(take(i));
    const started = performance.now();
    await first.release();
    await Promise.all(waiters);
    expect(order).toEqual([0, 1, 2, 3, 4]);
    expect(performance.now() - started).toBeLessThan(2000);
  });

  it('serves this process’s waiters in the order they began, also when the first lines up last', async () => {
    const resource = unique('late-line');
    const held = await holder.acquire(resource);
    // Not connected yet: the first attempt of each fails at once, and each asks again after its
    // own delay, so the one that began first (a) lines up after the one that began later (b).
    const fresh = new LockEngine({ nodes: redis.nodes.map((n) => n.url), logger: quietLogger() });
    engines.push(fresh);
    // Both lined up on the nodes: each refusal after a first attempt takes a place in the nodes'
    // lines. Read after each refusal (an event), whatever a busy machine does to the timing.
    const lineKey = `lock:{${resource}}:q`;
    const bothInLine = new Promise<number>((resolve) => {
      let firsts = 0;
      const listener = (event: { resources: readonly string[]; attempt: number }) => {
        if (event.resources[0] !== resource) return;
        if (event.attempt === 1) firsts++;
        void Promise.all(redis.nodes.map((n) => n.cli('HLEN', lineKey))).then((lengths) => {
          if (!lengths.some((length) => Number(length) >= 2)) return;
          fresh.off('contended', listener);
          resolve(firsts);
        });
      };
      fresh.on('contended', listener);
    });
    const order: string[] = [];
    const take = (name: string, delay: number) =>
      fresh
        .acquire(resource, { retry: { delay, factor: 1, maxDelay: delay, jitter: 0 } })
        .then(async (lock) => {
          order.push(name);
          await lock.release();
        });
    const a = take('a', 300);
    const b = take('b', 20);
    // The second refusal of each put it in the nodes' lines, a ahead of b (it began first).
    expect(await bothInLine).toBe(0);
    await Promise.all(fresh.nodes.map((node) => node.client.ping()));
    await held.release();
    await Promise.all([a, b]);
    // The release names a, first in the nodes' lines: a must be first in this process's line too,
    // or neither asks in turn (b is refused until a's place expires, and a is never woken).
    expect(order).toEqual(['a', 'b']);
  });

  it('takes a free lock in the attempt that joins the line when it arrived before everyone there', async () => {
    const resource = unique('ghost-behind');
    const key = `lock:{${resource}}:q`;
    // A waiter that began after us and vanished, first in line until we join it.
    for (const node of redis.nodes) {
      await node.cli('HSET', key, 'ghost', `${Date.now() + 60_000} ${Date.now() + 60_000}`);
      await node.cli('PEXPIRE', key, '60000');
    }
    const attempts = new Promise<number>((resolve) =>
      holder.once('acquired', (event) => resolve(event.attempts)),
    );
    const started = performance.now();
    const lock = await holder.acquire(resource, { retry: SLOW_POLLING });
    // A call that may wait joins the line with its first attempt, ahead of the ghost by arrival,
    // and is granted in that same call: no second attempt, no retry delay.
    expect(await attempts).toBe(1);
    expect(performance.now() - started).toBeLessThan(1000);
    await lock.release();
  });

  it('lets a waiter behind another of its process wait for the release instead of asking while the lock is held', async () => {
    const own = await engine();
    const resource = unique('behind');
    const held = await own.acquire(resource);
    const first = own.acquire(resource, { retry: SLOW_POLLING });
    await inNodesLine(own, resource);
    let refusals = 0;
    own.on('contended', (event) => {
      if (event.resources[0] === resource) refusals++;
    });
    const second = own.acquire(resource, { retry: SLOW_POLLING });
    await held.release();
    // The second is first in this process's line from here on; the lock is the first's, held
    // until anything the second might have sent meanwhile has had its answer: its batch went
    // out in the turn it was made, and a PING behind it on the same connections comes back after.
    const taken = await first;
    await new Promise((resolve) => setImmediate(resolve));
    await Promise.all(own.nodes.map((node) => node.client.ping()));
    await new Promise((resolve) => setImmediate(resolve));
    await taken.release();
    await (await second).release();
    // It asked once, after the first's release, and got the lock: never refused.
    expect(refusals).toBe(0);
  });

  it('moves the line on when the first waiter gives up or is aborted', async () => {
    const resource = unique('give-up');
    const lock = await holder.acquire(resource);
    const controller = new AbortController();
    const aborted = holder.acquire(resource, { signal: controller.signal, retry: SLOW_POLLING });
    await nextLockEvent(holder, 'contended', resource);
    const impatient = holder.acquire(resource, { waitTimeout: 200, retry: SLOW_POLLING });
    const patient = holder.acquire(resource, { retry: SLOW_POLLING });
    controller.abort();
    await expect(aborted).rejects.toBeInstanceOf(LockAbortedError);
    await expect(impatient).rejects.toBeInstanceOf(LockTimeoutError);
    const started = performance.now();
    await lock.release();
    const next = await patient;
    expect(performance.now() - started).toBeLessThan(1000);
    await next.release();
  });

  const contention = (engine: LockEngine, resource: string) =>
    nextLockEvent(engine, 'contended', resource);
  /**
   * A waiter in the nodes' line: its first refused attempt joined it (one that did not yet
   * listen for releases asks once more at once, which only renews its place). That refusal is
   * decided by a quorum; a PING behind the attempt on each of the waiter's connections comes
   * back once every node has run it, so the waiter is in line on all of them.
   */
  const inNodesLine = async (engine: LockEngine, resource: string) => {
    await nextLockEvent(engine, 'contended', resource);
    await Promise.all(engine.nodes.map((node) => node.client.ping()));
  };

  /** `owner` holds the lock while `waiter` waits for it in the nodes' line (retry: SLOW_POLLING). */
  const waitingBehind = async (waiter: LockEngine, resource: string, owner = holder) => {
    const lock = await owner.acquire(resource);
    const waiting = waiter.acquire(resource, { retry: SLOW_POLLING });
    await inNodesLine(waiter, resource);
    return { lock, waiting };
  };

  it('serves waiters of different processes in the order they arrived, not the order the release reaches them', async () => {
    const [a, b, c] = [await engine(), await engine(), await engine()];
    const resource = unique('arrival');
    // c waits once first, so its subscription to the key's channel is the oldest:
    // every later release message reaches c before a and b.
    const held = await holder.acquire(resource);
    const early = c.acquire(resource, { retry: SLOW_POLLING });
    await contention(c, resource);
    await held.release();
    const cHolds = await early;
    const order: string[] = [];
    const take = (name: string, engine: LockEngine) => {
      const waiting = engine.acquire(resource, { retry: SLOW_POLLING }).then(async (lock) => {
        order.push(name);
        await lock.release();
      });
      return { waiting, contended: inNodesLine(engine, resource) };
    };
    const inLine: ReturnType<typeof take>[] = [];
    for (const [name, waiter] of [
      ['a', a],
      ['b', b],
      ['c', c],
    ] as const) {
      inLine.push(take(name, waiter));
      await inLine[inLine.length - 1].contended;
    }
    await cHolds.release();
    await Promise.all(inLine.map((waiter) => waiter.waiting));
    expect(order).toEqual(['a', 'b', 'c']);
    // Each left the line when it got the lock.
    for (const node of redis.nodes) {
      expect(await node.cli('EXISTS', `lock:{${resource}}:q`)).toBe('0');
    }
  });

  it('wakes only the waiter the release names first in line; the others stay asleep', async () => {
    const [a, b, c] = [await engine(), await engine(), await engine()];
    const resource = unique('named');
    const held = await holder.acquire(resource);
    const attempts = new Map<LockEngine, number>();
    const order: string[] = [];
    const inLine: Promise<void>[] = [];
    for (const [name, waiter] of [
      ['a', a],
      ['b', b],
      ['c', c],
    ] as const) {
      // Refused once, then once more right after subscribing (a release may have come before).
      const contended = new Promise<void>((resolve) =>
        waiter.on('contended', () => {
          attempts.set(waiter, (attempts.get(waiter) ?? 0) + 1);
          if (attempts.get(waiter) === 2) resolve();
        }),
      );
      inLine.push(
        waiter.acquire(resource, { retry: SLOW_POLLING }).then(async (lock) => {
          order.push(name);
          await lock.release();
        }),
      );
      await contended;
    }
    await held.release();
    await Promise.all(inLine);
    expect(order).toEqual(['a', 'b', 'c']);
    // Three releases went out (the holder's, a's, b's); each woke one waiter, which got the lock:
    // nobody was refused again.
    expect([attempts.get(a), attempts.get(b), attempts.get(c)]).toEqual([2, 2, 2]);
  });

  it('lets eight processes take turns on one hot key on three nodes: each served in full, tokens rising', async () => {
    const workers = await Promise.all(Array.from({ length: 8 }, () => engine()));
    const resource = unique('hot');
    const tokens: number[] = [];
    const grants = workers.map(() => 0);
    await Promise.all(
      workers.map(async (worker, w) => {
        for (let cycle = 0; cycle < 5; cycle++) {
          // Only release messages move the waiters (their fallback delay is 5 s).
          const lock = await worker.acquire(resource, { retry: SLOW_POLLING, waitTimeout: 20_000 });
          tokens.push(lock.token!);
          grants[w]++;
          await lock.release();
        }
      }),
    );
    expect(grants).toEqual(workers.map(() => 5));
    expect(tokens).toEqual([...tokens].sort((x, y) => x - y));
    expect(new Set(tokens).size).toBe(tokens.length);
  });

  it('sends the clean-up of a refused attempt only to nodes that did not refuse it', async () => {
    const resource = unique('refused');
    const lock = await holder.acquire(resource);
    const other = await engine();
    const calls = () =>
      Promise.all(
        redis.nodes.map(async (node) => {
          const stats = await node.cli('INFO', 'commandstats');
          return Number(/^cmdstat_evalsha:calls=(\d+)/m.exec(stats)?.[1] ?? 0);
        }),
      );
    const before = await calls();
    await expect(other.tryAcquire(resource)).rejects.toBeInstanceOf(LockBusyError);
    // Whatever the round left unanswered is cleaned up: behind the attempt on its connection.
    await Promise.all(other.nodes.map((node) => node.client.ping()));
    const sent = (await calls()).reduce((sum, count, i) => sum + count - before[i], 0);
    // One attempt per node and nothing else: the node whose refusal the quorum did not wait for
    // refused too when it answered; a release on every node would make six.
    expect(sent).toBe(3);
    await lock.release();
  });

  /**
   * Runs `during` with the third node paused, so that its reply comes after the round was
   * decided; then awaits `event` on `key` there (within 5 s, else fails saying `missing`), after
   * which the key must be gone.
   */
  const lateReplyThen = async <T>(
    key: string,
    event: 'del' | 'hdel',
    during: () => Promise<T>,
    missing: string,
  ): Promise<T> => {
    const late = redis.nodes[2];
    await late.cli('CONFIG', 'SET', 'notify-keyspace-events', event === 'del' ? 'Kg' : 'Kh');
    const watcher = new Redis(late.url);
    try {
      await watcher.subscribe(`__keyspace@0__:${key}`);
      const seen = new Promise<void>((resolve) =>
        watcher.on('message', (_channel: string, name: string) => name === event && resolve()),
      );
      await late.pause();
      let result: T;
      try {
        result = await during();
      } finally {
        await late.resume();
      }
      let timer: NodeJS.Timeout | undefined;
      const bound = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(missing)), 5000);
      });
      await Promise.race([seen, bound]).finally(() => clearTimeout(timer));
      expect(await late.cli('EXISTS', key)).toBe('0');
      return result;
    } finally {
      watcher.disconnect();
      await late.cli('CONFIG', 'SET', 'notify-keyspace-events', '');
    }
  };

  it('releases a refused attempt on a node that granted it after the round was decided', async () => {
    const resource = unique('late-grant');
    const key = `lock:{${resource}}`;
    // Held by someone else on two nodes; the third is free, and its grant comes late: its reply
    // sends the release (the grant sets the key, the clean-up deletes it).
    for (const node of redis.nodes.slice(0, 2))
      await node.cli('SET', key, 'someone', 'PX', '60000');
    const other = await engine();
    await lateReplyThen(
      key,
      'del',
      () => expect(other.tryAcquire(resource)).rejects.toBeInstanceOf(LockBusyError),
      'the late grant was not released',
    );
  });

  it('leaves the line of a node that refused a waiting call whose first attempt a quorum granted', async () => {
    const resource = unique('granted-at-once');
    // Held by someone else on the third node only, whose refusal comes late. It put the waiter
    // in that node's line; left there, its place would rank ahead of every later waiter on the
    // node until it expired.
    await redis.nodes[2].cli('SET', `lock:{${resource}}`, 'someone', 'PX', '60000');
    const other = await engine();
    const lock = await lateReplyThen(
      `lock:{${resource}}:q`,
      'hdel',
      () => other.acquire(resource, { retry: SLOW_POLLING }),
      "the waiter stayed in the node's line",
    );
    await lock.release();
  });

  it('a waiter that vanished without leaving the line holds it only until its place expires', async () => {
    const resource = unique('vanished');
    const key = `lock:{${resource}}:q`;
    // A waiter from long ago whose process died: first in line for 300 ms more.
    for (const node of redis.nodes) {
      const [seconds, micros] = (await node.cli('TIME')).split('\n').map(Number);
      const expiry = seconds * 1000 + Math.floor(micros / 1000) + 300;
      await node.cli('HSET', key, 'ghost', `1 ${expiry}`);
      await node.cli('PEXPIRE', key, '10000');
    }
    await expect(holder.tryAcquire(resource)).rejects.toBeInstanceOf(LockBusyError);
    const lock = await holder.acquire(resource, { retry: { delay: 20, factor: 1, maxDelay: 20 } });
    expect(lock.isHeld).toBe(true);
    await lock.release();
    // Nobody but the ghost is left in line: a node whose attempt ran while the ghost's place was
    // still valid keeps that expired place until the next attempt there prunes it.
    for (const node of redis.nodes) expect(['', 'ghost']).toContain(await node.cli('HKEYS', key));
  });

  it('takes a waiter that gives up out of the line on every node', async () => {
    const resource = unique('leaves');
    const lock = await holder.acquire(resource);
    const other = await engine();
    const impatient = other.acquire(resource, { waitTimeout: 300, retry: SLOW_POLLING });
    await inNodesLine(other, resource);
    for (const node of redis.nodes) {
      expect(await node.cli('HLEN', `lock:{${resource}}:q`)).toBe('1');
    }
    await expect(impatient).rejects.toBeInstanceOf(LockTimeoutError);
    await lock.release();
    // The line is gone once the node has run the HDEL the engine sent on giving up.
    for (const node of redis.nodes) {
      expect(await node.cli('EXISTS', `lock:{${resource}}:q`)).toBe('0');
    }
  });

  /** PUBLISH calls each node has run so far (the release script's included). */
  const publishes = () =>
    Promise.all(
      redis.nodes.map(async (node) => {
        const stats = await node.cli('INFO', 'commandstats');
        return Number(/^cmdstat_publish:calls=(\d+)/m.exec(stats)?.[1] ?? 0);
      }),
    );

  it('sends no release message for a lock nobody waits for, and one per node when someone does', async () => {
    const resource = unique('unheard');
    const before = await publishes();
    await (await holder.acquire(resource)).release();
    expect(await publishes()).toEqual(before);

    const waiter = await engine();
    const { lock, waiting } = await waitingBehind(waiter, resource);
    await lock.release();
    await (await waiting).release();
    // The holder's release had a waiter in line; the waiter's own release had none.
    expect(await publishes()).toEqual(before.map((count) => count + 1));
  });

  it('names the first waiter in line and the sender in a release message; the sender skips its own', async () => {
    const resource = unique('own-message');
    const key = `lock:{${resource}}`;
    const waiter = await engine();
    const { lock, waiting } = await waitingBehind(waiter, resource);
    const watcher = new Redis(redis.nodes[0].url);
    try {
      await watcher.subscribe(key);
      const heard = once(watcher, 'message');
      await lock.release();
      const [, message] = (await heard) as [string, string];
      const [head, sender] = message.split(' ');
      // The waiter's name (its first attempt's 128-bit value), then the holder engine's.
      expect(head).toMatch(/^[\w-]{22}$/);
      expect(sender).toMatch(/^[\w-]{12}$/);
      await (await waiting).release();

      // A subscriber named `sender` drops that sender's messages (in order on one connection:
      // had the first been passed on, it would be the first heard).
      const received: [string, string][] = [];
      const twoHeard = new Promise<void>((resolve) => {
        const channel = new ReleaseChannel(
          [holder.nodes[0]],
          (k, h) => {
            received.push([k, h]);
            if (received.length === 2) resolve();
          },
          sender,
          'lock:',
        );
        void channel
          .subscribe([key], 2000)
          .then(async () => {
            await watcher.unsubscribe(key);
            await watcher.publish(key, `own ${sender}`);
            await watcher.publish(key, 'other-head someone-else');
            await watcher.publish(key, '');
            await twoHeard;
          })
          .finally(() => channel.close());
      });
      await twoHeard;
      expect(received).toEqual([
        [key, 'other-head'],
        [key, ''],
      ]);
    } finally {
      watcher.disconnect();
    }
  });

  /** An engine that waited once: its own channel is subscribed, and its waiters' names lead there. */
  const listeningEngine = async () => {
    const created = await engine();
    const resource = unique('first-wait');
    const { lock, waiting } = await waitingBehind(created, resource);
    await lock.release();
    await (await waiting).release();
    // The wait may end before the nodes confirm the subscription (on a new connection) to the
    // engine's own channel; waiters are named after the engine only from then on.
    const { channel } = created as unknown as { channel: ReleaseChannel };
    expect(await channel.ownChannelReady()).toBe(true);
    return created;
  };
  /** The one waiter in a lock's line on node 0 (its name there). */
  const onlyWaiter = async (resource: string) => {
    const line = (await redis.nodes[0].cli('HKEYS', `lock:{${resource}}:q`)).trim().split('\n');
    expect(line).toHaveLength(1);
    return line[0];
  };

  it("sends a release that names another engine's waiter on that engine's own channel only, not the key's", async () => {
    const waiter = await listeningEngine();
    const resource = unique('targeted');
    const key = `lock:{${resource}}`;
    const { lock, waiting } = await waitingBehind(waiter, resource);
    // Named after its engine: `<sender>.<n>`.
    const name = await onlyWaiter(resource);
    const sender = /^([\w-]{12})\.[0-9a-z]+$/.exec(name)?.[1];
    expect(sender).toBeDefined();
    const ownChannel = `lock:waiters:${sender}`;
    const watcher = new Redis(redis.nodes[0].url);
    const publisher = new Redis(redis.nodes[0].url);
    try {
      await watcher.subscribe(key, ownChannel);
      const heard: [string, string][] = [];
      let marked: () => void;
      const markerHeard = new Promise<void>((resolve) => (marked = resolve));
      watcher.on('message', (channel: string, message: string) => {
        heard.push([channel, message]);
        if (message === 'marker') marked();
      });
      const started = performance.now();
      await lock.release();
      const next = await waiting;
      expect(performance.now() - started).toBeLessThan(1000);
      // Published after the release (on one connection, in order): heard last if nothing else was.
      await publisher.publish(key, 'marker');
      await markerHeard;
      expect(heard).toEqual([
        [ownChannel, `${name} ${key}`],
        [key, 'marker'],
      ]);
      await next.release();
    } finally {
      watcher.disconnect();
      publisher.disconnect();
    }
  });

  it("sends no message at all for a release that names the releasing engine's own waiter", async () => {
    const own = await listeningEngine();
    const resource = unique('self-targeted');
    const { lock, waiting } = await waitingBehind(own, resource, own);
    expect(await onlyWaiter(resource)).toMatch(/^[\w-]{12}\.[0-9a-z]+$/);
    const before = await publishes();
    await lock.release();
    // Woken in its own process, at once.
    await (await waiting).release();
    expect(await publishes()).toEqual(before);
  });

  it('closes its subscriber connections when the engine closes', async () => {
    const admin = new Redis(redis.nodes[0].url);
    const clients = async () => ((await admin.client('LIST')) as string).trim().split('\n').length;
    const before = await clients();
    const waiter = new LockEngine({ nodes: redis.nodes.map((n) => n.url), logger: quietLogger() });
    await waiter.connect();
    const resource = unique('subscribers');
    const lock = await holder.acquire(resource);
    const waiting = waiter.acquire(resource);
    await nextLockEvent(waiter, 'contended', resource);
    await lock.release();
    await (await waiting).release();
    // Its own connection, and the subscriber it opened to wait.
    expect(await clients()).toBe(before + 2);
    await waiter.close();
    expect(await clients()).toBe(before);
    await admin.quit();
  });
  it('subscribes again after its nodes restart, so a waiter is still woken by the release', async () => {
    const waiter = await engine();
    const resource = unique('resubscribe');
    const key = `lock:{${resource}}`;
    // One wait subscribes the waiter to the key's channel on every node (it lingers afterwards).
    const first = await holder.acquire(resource);
    const waited = waiter.acquire(resource, { retry: SLOW_POLLING });
    await contention(waiter, resource);
    await first.release();
    await (await waited).release();
    // Every node restarts: a release can now reach the waiter only through new subscriptions.
    for (const node of redis.nodes) await node.restart();
    await engineReady(...engines);
    // The subscriber reconnects on its own schedule, with no event the test can see: ask the nodes.
    const deadline = performance.now() + 10_000;
    for (const node of redis.nodes) {
      while ((await node.cli('PUBSUB', 'NUMSUB', key)).split('\n')[1] !== '1') {
        if (performance.now() > deadline) throw new Error(`no subscriber came back on ${key}`);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    }
    const lock = await holder.acquire(resource);
    const waiting = waiter.acquire(resource, { retry: SLOW_POLLING });
    await contention(waiter, resource);
    const released = performance.now();
    await lock.release();
    await (await waiting).release();
    expect(performance.now() - released).toBeLessThan(1000);
  });
});
