/**
 * A rolling deploy's SIGTERM, for real: a Nest app in its own process with
 * shutdown hooks receives the signal while a `@Locked()` method runs. The
 * method finishes under its lock (extended meanwhile), its release reaches
 * every node before another instance is granted the lock, new requests are
 * answered 503 meanwhile, and the process exits within `shutdownTimeout`.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import type { ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { spawnScript } from '../../dev/scripts.js';
import { LockEngine, type ReleaseResult } from '../../lib/engine/index.js';
import { machineNow as now } from '../support/machine-clock.js';
import { quietLogger } from '../support/quiet-logger.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';

const script = fileURLToPath(new URL('../support/shutdown-app.ts', import.meta.url));
const redis = useRedisNodes(3);
/** The lock key of the app's `@Locked('shutdown:work')` on every node (default keyPrefix). */
const WORK_KEY = 'lock:{shutdown:work}';

interface AppEvent {
  readonly event: string;
  readonly at: number;
  readonly port?: number;
  readonly result?: ReleaseResult;
  readonly nodes?: { granted: number; denied: number; failed: number };
}

/** The app's process and the events it printed, awaited by name. */
class AppProcess {
  readonly events: AppEvent[] = [];
  private readonly waiters: { name: string; resolve: (e: AppEvent) => void }[] = [];
  /** How the process ended: Nest re-raises the signal once its shutdown hooks are done. */
  readonly exited: Promise<string>;
  stderr = '';

  constructor(readonly child: ChildProcess) {
    createInterface({ input: child.stdout! }).on('line', (line) => {
      const event = JSON.parse(line) as AppEvent;
      this.events.push(event);
      for (const waiter of this.waiters.filter((w) => w.name === event.event)) {
        this.waiters.splice(this.waiters.indexOf(waiter), 1);
        waiter.resolve(event);
      }
    });
    child.stderr!.on('data', (chunk: Buffer) => (this.stderr += chunk.toString()));
    this.exited = once(child, 'close').then(() => child.signalCode ?? `exit ${child.exitCode}`);
  }

  static start(nodes: readonly string[], shutdownTimeout: number): AppProcess {
    const child = spawnScript(script, {
      args: ['--nodes', nodes.join(','), '--shutdown-timeout', String(shutdownTimeout)],
      stdin: 'ignore',
    });
    return new AppProcess(child);
  }

  /** The first event of that name, already printed or still to come. */
  next(name: string): Promise<AppEvent> {
    const seen = this.events.find((e) => e.event === name);
    if (seen) return Promise.resolve(seen);
    return new Promise((resolve) => this.waiters.push({ name, resolve }));
  }

  of(name: string): AppEvent[] {
    return this.events.filter((e) => e.event === name);
  }
}

describe('graceful shutdown on SIGTERM', () => {
  let other: LockEngine;
  const apps: AppProcess[] = [];

  beforeAll(async () => {
    other = new LockEngine({ nodes: redis.nodes.map((n) => n.url), logger: quietLogger() });
    await other.connect();
  });
  afterEach(() => {
    for (const app of apps) if (app.child.exitCode === null) app.child.kill('SIGKILL');
  });
  afterAll(() => other.close());

  async function startApp(shutdownTimeout: number): Promise<{ app: AppProcess; url: string }> {
    const app = AppProcess.start(
      redis.nodes.map((n) => n.url),
      shutdownTimeout,
    );
    apps.push(app);
    const listening = await Promise.race([
      app.next('listening'),
      app.exited.then(() => {
        throw new Error(`the app exited before listening: ${app.stderr}`);
      }),
    ]);
    return { app, url: `http://127.0.0.1:${listening.port}` };
  }

  /**
   * Starts the app, sends it a locked request whose work takes `workMs`, and
   * SIGTERM once the work began; another instance then asks for the same
   * lock at once and waits (`granted`: when it got it).
   */
  /**
   * The nodes a release reached: every node that deleted the key, answered
   * that it held none of ours, or was still answering. A lock is a quorum's
   * grant, so a node may not hold it (a clean-clone CI run found
   * `nodesNotHeld: 1` with no failure); nothing of ours is left there either.
   * Only a failed node keeps what it may hold until its lease ends. Compared
   * whole, with the result and how the nodes answered the lock's attempts,
   * grant and renewals, so that a failure shows which node answered what.
   */
  const reached = (app: AppProcess, result: ReleaseResult, atWork: readonly string[]) => ({
    reached: result.nodesReleased + result.nodesNotHeld + result.nodesPending,
    // One line each, so that Jest's diff shows them whole beside the count.
    result: JSON.stringify(result),
    lockHistory: JSON.stringify(app.events.filter((e) => e.nodes ?? e.event === 'lost')),
    nodesAtWork: JSON.stringify(atWork),
  });
  const allReached = (app: AppProcess, result: ReleaseResult, atWork: readonly string[]) => ({
    ...reached(app, result, atWork),
    reached: 3,
  });

  /** What each node had of the lock while the method worked: its key's value and TTL, its line. */
  const nodesAtWork = () =>
    Promise.all(
      redis.nodes.map(async (node) =>
        [
          await node.cli('GET', WORK_KEY),
          await node.cli('PTTL', WORK_KEY),
          await node.cli('HGETALL', `${WORK_KEY}:q`),
        ]
          .map((answer) => answer.trim().replace(/\n/g, ' '))
          .join(' | '),
      ),
    );

  async function signalDuringWork(shutdownTimeout: number, workMs: number) {
    const { app, url } = await startApp(shutdownTimeout);
    const request = fetch(`${url}/work?ms=${workMs}`, { method: 'POST' });
    await app.next('started');
    const signalled = now();
    app.child.kill('SIGTERM');
    // Read before the other instance asks: the lock is the app's alone then.
    const atWork = await nodesAtWork();
    const granted = other.acquire('shutdown:work', { waitTimeout: 10_000 }).then((lock) => {
      const at = now();
      return lock.release().then(() => at);
    });
    return { app, url, request, signalled, granted, atWork };
  }

  it('lets the locked method finish, releases on every node before another instance gets the lock, and exits in time', async () => {
    const { app, url, request, signalled, granted, atWork } = await signalDuringWork(5000, 1500);
    // Meanwhile the app takes no new lock: another request is turned away with 503.
    const refused = await fetch(`${url}/work?ms=10`, { method: 'POST' });
    expect(refused.status).toBe(503);

    const response = await request;
    expect(response.status).toBe(201);
    expect(await response.text()).toBe('done');
    const [finished, released] = [await app.next('finished'), await app.next('released')];
    expect(released.result).toMatchObject({ released: true });
    expect(reached(app, released.result!, atWork)).toEqual(
      allReached(app, released.result!, atWork),
    );
    // The other instance got the lock only once the method was done with it.
    expect(await granted).toBeGreaterThan(finished.at);
    expect(await app.exited).toBe('SIGTERM');
    expect(now() - signalled).toBeLessThan(5000);
    expect(app.of('aborted')).toEqual([]);
  });

  it('aborts the signal of a method that outlives shutdownTimeout, then releases its lock', async () => {
    const { app, request, signalled, granted, atWork } = await signalDuringWork(500, 20_000);
    const aborted = await app.next('aborted');
    // Told after the timeout, long before the work would have ended.
    expect(aborted.at - signalled).toBeGreaterThanOrEqual(450);
    expect(aborted.at - signalled).toBeLessThan(3000);
    const released = await app.next('released');
    expect(released.result).toMatchObject({ released: true });
    expect(reached(app, released.result!, atWork)).toEqual(
      allReached(app, released.result!, atWork),
    );
    expect(await granted).toBeGreaterThan(aborted.at);
    await request.catch(() => undefined);
    expect(await app.exited).toBe('SIGTERM');
    expect(now() - signalled).toBeLessThan(5000);
  });
});
