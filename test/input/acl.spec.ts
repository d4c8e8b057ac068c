/**
 * A password node and ACL users, on real redis-server processes: the least
 * a user needs for the engine to lock, what each part of that is for, what
 * the administration calls add, and what happens when the start-up checks'
 * INFO and CONFIG GET are denied (a warning, not a failure).
 *
 * The minimal ACL for locking with the default keyPrefix 'lock:':
 *
 *   ~lock:* &lock:* -@all
 *   +evalsha +eval                       scripts run by SHA, by source after a SCRIPT FLUSH
 *   +set +get +pttl +incr +pexpire +del  what the scripts call (acquire, fence, extend, release)
 *   +exists +hgetall +hset +hdel +hlen +hexists +time   the waiters' line, first come first served across processes
 *                                        (optional: without it waiters are served in no set order)
 *   +publish +subscribe +unsubscribe     release notifications (optional: waiters poll without);
 *                                        &lock:* covers the engines' own channels lock:waiters:<id>
 *   +info +config|get                    start-up checks (optional: warned about, or checkNodes: false)
 *
 * and for inspect(), list(), forceRelease(), reseedFences() and health():
 *
 *   +scan +multi +exec +ping
 */
import {
  afterAll,
  afterEach,
  beforeAll,
  beforeEach,
  describe,
  expect,
  it,
  jest,
} from '@jest/globals';
import { randomUUID } from 'node:crypto';
import {
  LockBusyError,
  LockEngine,
  LockError,
  LockUnavailableError,
  type Lock,
  type LockEngineOptions,
} from '../../lib/engine/index.js';
import { quietLogger } from '../support/quiet-logger.js';
import { nextLockEvent, timedHandOff } from '../support/lock-events.js';
import { RedisNodeProcess } from '../../dev/redis/redis-nodes.js';
import { failOnUnhandledRejections } from './unhandled-rejections.js';

/** The default user's password, with characters a URL reserves. */
const PASSWORD = 'p@ss:w/rd%?#&=';
const USER_PASSWORD = 'user-pw-9';

const KEYS = ['~lock:*'];
const CHANNELS = ['&lock:*'];
const SCRIPTS = ['+evalsha', '+eval'];
const SCRIPT_COMMANDS = ['+set', '+get', '+pttl', '+incr', '+pexpire', '+del'];
const LINE = ['+exists', '+hgetall', '+hset', '+hdel', '+hlen', '+hexists', '+time'];
const NOTIFICATIONS = ['+publish', '+subscribe', '+unsubscribe'];
const CHECKS = ['+info', '+config|get'];
const ADMIN = ['+scan', '+multi', '+exec', '+ping'];
const LOCKING = [...SCRIPTS, ...SCRIPT_COMMANDS, ...LINE];
const MINIMAL = [...KEYS, ...CHANNELS, '-@all', ...LOCKING, ...NOTIFICATIONS, ...CHECKS];

failOnUnhandledRejections();

/** requirepass, durable (appendonly yes, appendfsync always). */
let node: RedisNodeProcess;
/** requirepass and appendonly off, which the start-up checks report. */
let volatileNode: RedisNodeProcess;

const engines: LockEngine[] = [];
let consoleWarn: jest.SpiedFunction<typeof console.warn>;

beforeAll(async () => {
  [node, volatileNode] = await Promise.all([
    RedisNodeProcess.start({ requirepass: PASSWORD }),
    RedisNodeProcess.start({ requirepass: PASSWORD, appendonly: false }),
  ]);
});
afterAll(async () => {
  await Promise.all([node?.stop(), volatileNode?.stop()]);
});
beforeEach(() => {
  // ioredis tells the console (not the engine's logger) when it skips its ready check for want of INFO.
  consoleWarn = jest.spyOn(console, 'warn').mockImplementation(() => undefined);
});
afterEach(async () => {
  consoleWarn.mockRestore();
  await Promise.all(engines.splice(0).map((e) => e.close({ timeout: 0 })));
});

const unique = (name: string) => `${name}:${randomUUID()}`;
const labelOf = (n: RedisNodeProcess) => `${n.host}:${n.port}`;
let users = 0;

/** Creates an ACL user with these rules on `on` and returns its redis:// URL. */
async function user(rules: readonly string[], on = node): Promise<string> {
  const name = `locker${++users}`;
  await on.cli('ACL', 'SETUSER', name, 'reset', 'on', `>${USER_PASSWORD}`, ...rules);
  return `redis://${name}:${USER_PASSWORD}@${on.host}:${on.port}`;
}

async function connected(url: string, options: Partial<LockEngineOptions> = {}) {
  const logger = quietLogger();
  const engine = new LockEngine({ nodes: [url], logger, ...options });
  engines.push(engine);
  await engine.connect();
  return Object.assign(engine, { logger });
}

/** What a call threw (or rejected with), or undefined. */
async function thrown(call: () => Promise<unknown>): Promise<unknown> {
  try {
    await call();
    return undefined;
  } catch (error) {
    return error;
  }
}

describe('a node with requirepass', () => {
  it('takes a password with URL-reserved characters percent-encoded in a redis:// URL, and as { password }', async () => {
    const fromUrl = await connected(node.url);
    const fromOptions = new LockEngine({
      nodes: [{ host: node.host, port: node.port, password: PASSWORD }],
      logger: quietLogger(),
    });
    engines.push(fromOptions);
    await fromOptions.connect();
    const resource = unique('password');
    const lock = await fromUrl.tryAcquire(resource);
    await expect(fromOptions.tryAcquire(resource)).rejects.toBeInstanceOf(LockBusyError);
    await lock.release();
    await (await fromOptions.tryAcquire(resource)).release();
    expect(fromUrl.logger.warnings).toEqual([]);
  });
});

describe('the minimal ACL for locking', () => {
  it('grants, extends, refuses while held, wakes a waiter of another engine, runs using() and releases, without a warning', async () => {
    const url = await user(MINIMAL);
    await node.cli('SCRIPT', 'FLUSH'); // so the EVAL fallback runs too
    const holder = await connected(url);
    const waiter = await connected(url);
    const resource = unique('minimal');

    const lock = await holder.tryAcquire(resource);
    await lock.extend();
    const busy = (await thrown(() => waiter.tryAcquire(resource))) as LockBusyError;
    expect(busy).toBeInstanceOf(LockBusyError);
    expect(busy.retryAfter).toBeGreaterThan(0);

    // A retry delay so long that only the release message can explain a quick hand-off. The
    // release comes after the second refusal: the first one lines the waiter up and it asks again
    // at once, so only after the second does it sleep its retry delay.
    const retry = { delay: 5000, maxDelay: 5000, factor: 1, jitter: 0 };
    const { next, released, ms } = await timedHandOff(lock, waiter, resource, retry, 2);
    expect(released.released).toBe(true);
    expect(ms).toBeLessThan(2000);
    expect(next.token).toBeGreaterThan(lock.token!);
    await next.release();

    await expect(holder.using(resource, (l: Lock) => l.isHeld)).resolves.toBe(true);
    expect([...holder.logger.warnings, ...waiter.logger.warnings]).toEqual([]);
    expect(consoleWarn).not.toHaveBeenCalled();
  });

  it.each([
    ['&lock:*', 'its own channel, lock:waiters:<engine>', /^[\w-]{12}\.[0-9a-z]+$/],
    ["&lock:{*, the keys' channels only", "the key's channel", /^[\w-]{22}$/],
  ])(
    'with channel rights %s, a release wakes a waiter that waited before through %s',
    async (rule, _through, name) => {
      const url = await user([...KEYS, rule.split(',')[0], '-@all', ...LOCKING, ...NOTIFICATIONS]);
      const holder = await connected(url, { checkNodes: false });
      const waiter = await connected(url, { checkNodes: false });
      const retry = { delay: 5000, maxDelay: 5000, factor: 1, jitter: 0 };
      // The first wait subscribes the waiter's engine to its channels.
      const first = unique('first-wait');
      await (
        await timedHandOff(await holder.tryAcquire(first), waiter, first, retry, 2)
      ).next.release();

      const resource = unique('channel-rights');
      const lock = await holder.tryAcquire(resource);
      const contended = nextLockEvent(waiter, 'contended', resource, 2);
      const waiting = waiter.acquire(resource, { retry });
      await contended;
      // Its name in the line tells where a release naming it is sent (see TELL_LUA).
      const line = await node.cli('HKEYS', `lock:{${resource}}:q`);
      expect(line.trim()).toMatch(name);
      const start = performance.now();
      await lock.release();
      const next = await waiting;
      expect(performance.now() - start).toBeLessThan(2000);
      await next.release();
      expect([...holder.logger.warnings, ...waiter.logger.warnings]).toEqual([]);
    },
  );

  it.each([...SCRIPTS, ...SCRIPT_COMMANDS].map((rule) => [rule.slice(1)]))(
    'needs %s: without it locking fails with a typed LockError from the node, never a crash',
    async (command) => {
      const url = await user(MINIMAL.filter((rule) => rule !== `+${command}`));
      await node.cli('SCRIPT', 'FLUSH');
      const holder = await connected(url);
      const other = await connected(url);
      const resource = unique(`without-${command}`);
      const problems: unknown[] = [];
      const attempt = async (call: () => Promise<unknown>) => {
        const error = await thrown(call);
        // Busy is no fault of the ACL: a lock an earlier step could not release is still held.
        if (error !== undefined && !(error instanceof LockBusyError)) problems.push(error);
      };

      let lock: Lock | undefined;
      await attempt(async () => (lock = await holder.tryAcquire(resource))); // SET (+ EVAL/EVALSHA)
      await attempt(async () => lock && (await lock.extend())); // GET, PEXPIRE
      await attempt(() => other.tryAcquire(resource)); // busy: GET, PTTL
      if (lock) {
        const result = await lock.release(); // GET, DEL
        if (!result.released) problems.push(...result.failures.map((f) => f.error));
      }
      await attempt(async () => (await holder.tryAcquire(resource)).release()); // INCR (the fence exists now)

      expect(problems.length).toBeGreaterThan(0);
      for (const problem of problems) {
        expect((problem as Error).message).toMatch(/NOPERM|can't run this command/);
        if (problem instanceof LockError) {
          expect(problem).toBeInstanceOf(LockUnavailableError);
          expect(problem.message).toContain(labelOf(node));
        }
      }
    },
  );

  it('needs no channel rights: without &lock:*, PUBLISH and SUBSCRIBE a waiter of another engine still gets the freed lock, by polling', async () => {
    const url = await user([...KEYS, '-@all', ...LOCKING, ...CHECKS]);
    const holder = await connected(url);
    const waiter = await connected(url);
    const resource = unique('no-channels');
    const lock = await holder.tryAcquire(resource);
    const contended = nextLockEvent(waiter, 'contended', resource, 2);
    const waiting = waiter.acquire(resource, {
      retry: { delay: 200, maxDelay: 200, factor: 1, jitter: 0 },
      waitTimeout: 10_000,
    });
    await contended;
    expect((await lock.release()).released).toBe(true);
    const next = await waiting;
    expect(next.isHeld).toBe(true);
    await next.release();
  });

  it("needs no waiters' line: without EXISTS, HGETALL, HSET, HDEL, HLEN, HEXISTS and TIME a waiter of another engine still gets the freed lock", async () => {
    const url = await user([
      ...KEYS,
      ...CHANNELS,
      '-@all',
      ...SCRIPTS,
      ...SCRIPT_COMMANDS,
      ...NOTIFICATIONS,
      ...CHECKS,
    ]);
    const holder = await connected(url);
    const waiter = await connected(url);
    const resource = unique('no-line');
    const lock = await holder.tryAcquire(resource);
    const contended = nextLockEvent(waiter, 'contended', resource, 2);
    const waiting = waiter.acquire(resource, { waitTimeout: 10_000 });
    await contended;
    expect(await node.cli('EXISTS', `lock:{${resource}}:q`)).toBe('0');
    expect((await lock.release()).released).toBe(true);
    const next = await waiting;
    expect(next.isHeld).toBe(true);
    await next.release();
  });

  it.each([
    // The node's counter (lock:fence) is a declared key: Redis refuses the script before it runs.
    ['node' as const, 'NOPERM this user has no permissions to access one of the keys'],
    // A resource's counter is not among the script's declared keys; Redis words that refusal its own way.
    [
      'resource' as const,
      "ERR The user executing the script can't access at least one of the keys",
    ],
  ])(
    'fails acquisition with NOPERM when the key pattern leaves out the fence counters (counted per %s), writing nothing',
    async (fenceCounter, refusal) => {
      const url = await user(['~lock:{*}', ...CHANNELS, '-@all', ...LOCKING, ...CHECKS]);
      const engine = await connected(url, { fenceCounter });
      const resource = unique('no-fence-keys');
      const error = (await thrown(() => engine.tryAcquire(resource))) as Error;
      expect(error).toBeInstanceOf(LockUnavailableError);
      expect(error.message).toContain(`${labelOf(node)}: ${refusal}`);
      expect(await node.cli('EXISTS', `lock:{${resource}}`)).toBe('0');
    },
  );

  it('needs neither the fence keys nor INCR with fencing off', async () => {
    const url = await user([
      '~lock:{*}',
      ...CHANNELS,
      '-@all',
      ...LOCKING.filter((rule) => rule !== '+incr'),
      ...CHECKS,
    ]);
    const engine = await connected(url, { fencing: false });
    const resource = unique('unfenced');
    const first = await engine.tryAcquire(resource);
    expect(first.token).toBeUndefined();
    await first.release();
    await (await engine.tryAcquire(resource)).release();
    expect(engine.logger.warnings).toEqual([]);
  });
});

describe('start-up checks without INFO or CONFIG GET', () => {
  it('warns, naming the node, that its set-up could not be checked and what to allow, then locks', async () => {
    const url = await user([
      ...KEYS,
      ...CHANNELS,
      '-@all',
      ...LOCKING,
      ...NOTIFICATIONS,
      '+config|get',
    ]);
    const engine = await connected(url);
    expect(engine.logger.warnings).toEqual([
      expect.stringContaining(`could not check the set-up of node ${labelOf(node)}`),
    ]);
    expect(engine.logger.warnings[0]).toMatch(
      /NOPERM.*'info'.*allow INFO and CONFIG GET.*checkNodes: false/,
    );
    // ioredis says, on the console, that it skipped its ready check.
    expect(consoleWarn).toHaveBeenCalledWith(expect.stringContaining('Skipping the ready check'));
    await (await engine.tryAcquire(unique('no-info'))).release();
  });

  it('with INFO and CONFIG both denied and checkNodes: false, starts without a warning of its own and locks', async () => {
    const url = await user([...KEYS, ...CHANNELS, '-@all', ...LOCKING, ...NOTIFICATIONS]);
    const engine = await connected(url, { checkNodes: false });
    expect(engine.logger.warnings).toEqual([]);
    await (await engine.tryAcquire(unique('unchecked'))).release();
  });

  it('with CONFIG GET denied, still runs the checks INFO answers: a node with appendonly off is reported', async () => {
    const url = await user(
      [...KEYS, ...CHANNELS, '-@all', ...LOCKING, ...NOTIFICATIONS, '+info'],
      volatileNode,
    );
    const engine = await connected(url);
    expect(engine.logger.warnings).toEqual([
      expect.stringContaining(`node ${labelOf(volatileNode)} has appendonly off`),
    ]);
    await (await engine.tryAcquire(unique('no-config'))).release();
  });

  it('with INFO denied, warns; with strict: true it refuses to start, since it cannot vouch for the node', async () => {
    const url = await user([...KEYS, ...CHANNELS, '-@all', ...LOCKING, ...NOTIFICATIONS]);
    const lenient = await connected(url);
    expect(lenient.logger.warnings.join('\n')).toContain('could not check the set-up');
    await (await lenient.tryAcquire(unique('unchecked'))).release();
    await expect(connected(url, { strict: true })).rejects.toThrow(/could not check the set-up/);
  });
});

describe('administration', () => {
  it('with SCAN, MULTI/EXEC and PING added, inspect(), list(), forceRelease(), reseedFences() and health() work', async () => {
    const url = await user([...MINIMAL, ...ADMIN]);
    const engine = await connected(url);
    const resource = unique('admin');
    const lock = await engine.tryAcquire(resource);

    const inspection = await engine.inspect(resource);
    expect(inspection.held).toBe(true);
    expect(inspection.holder).toBe(lock.value);
    expect(inspection.fence).toBe(lock.token);
    expect(await engine.list(`${resource.split(':')[0]}:*`)).toContain(resource);
    expect(await engine.reseedFences()).toEqual({ [labelOf(node)]: 0 });
    expect((await engine.health()).nodes).toEqual([
      expect.objectContaining({ node: labelOf(node), up: true }),
    ]);
    expect(await engine.forceRelease(resource)).toBe(1);
    expect((await engine.inspect(resource)).held).toBe(false);
  });

  it('without them, inspect() and health() report the NOPERM per node and reseedFences() throws LockUnavailableError naming the node', async () => {
    const url = await user(MINIMAL);
    const engine = await connected(url);
    const inspection = await engine.inspect(unique('no-admin'));
    expect(inspection.nodes[0].error).toMatch(/NOPERM|EXECABORT/);
    const health = await engine.health();
    expect(health.nodes[0].error).toMatch(/NOPERM.*'ping'/);
    const error = (await thrown(() => engine.reseedFences())) as Error;
    expect(error).toBeInstanceOf(LockUnavailableError);
    expect(error.message).toMatch(new RegExp(`${labelOf(node)}: NOPERM.*'scan'`));
  });
});
