/**
 * A lock client in its own OS process, so the chaos harness can pause it
 * (SIGSTOP) and kill it. It reaches the lock nodes through the fault proxies,
 * writes the stores under its locks and records every operation.
 *
 * ```sh
 * node --import tsx test/chaos/chaos-client.ts --id c1 --engine lib/engine/index.ts \
 *   --nodes redis://127.0.0.1:7001,... --store redis://127.0.0.1:7100 --sqlite /tmp/x/store.db \
 *   --seed 42 --clock-origin 123456789
 * ```
 *
 * `--engine` names the engine module to load: the real one, or a patched copy
 * (engine-variants.ts). Protocol: commands on stdin and messages on stdout,
 * one JSON object per line (ClientCommand, ClientMessage in history.ts).
 */
import { createInterface } from 'node:readline';
import { setImmediate as nextTurn, setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import type { Lock, Permit } from '../../lib/engine/index.js';
import {
  absolute,
  now,
  setClockOrigin,
  type ClientCommand,
  type ClientMessage,
  type OpEvent,
  type OpName,
  type SectionOptions,
} from './history.js';
import { derivedSeed, random } from './seeded.js';
import { RedisFencedStore, SqliteFencedStore } from './stores.js';

type EngineModule = typeof import('../../lib/engine/index.js');

const { values } = parseArgs({
  options: {
    id: { type: 'string' },
    engine: { type: 'string' },
    nodes: { type: 'string' },
    store: { type: 'string' },
    sqlite: { type: 'string' },
    ttl: { type: 'string', default: '300' },
    'wait-timeout': { type: 'string', default: '2000' },
    'node-timeout': { type: 'string', default: '100' },
    'fence-ttl': { type: 'string', default: '0' },
    'fence-counter': { type: 'string', default: 'node' },
    seed: { type: 'string', default: '1' },
    'clock-origin': { type: 'string' },
  },
});
if (!values.id || !values.engine || !values.nodes || !values.store || !values.sqlite) {
  throw new Error(
    'usage: chaos-client.ts --id c1 --engine path --nodes url,... --store url --sqlite path',
  );
}
const CLIENT = values.id;
const SEED = Number(values.seed);
// Before the first event: every time this process records is on the harness's time line.
if (values['clock-origin']) setClockOrigin(BigInt(values['clock-origin']));
const TTL = Number(values.ttl);
const WAIT = Number(values['wait-timeout']);
/** Beyond its wait, an acquisition may take one more attempt and its fencing round. */
const ACQUIRE_SLACK = 3000;
const CALL_BOUND = 3000;
/** How a write refused by a store's fence fails (the checker counts these). */
const REJECTED = 'rejected: a write with this token or a later one came first';

function send(message: ClientMessage): void {
  // Pipes are synchronous on Linux: a line written before a SIGKILL is not lost.
  process.stdout.write(`${JSON.stringify(message)}\n`);
}

function describe(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}

let lastId = 0;

/** One recorded operation: its invoke is sent at once, its completion once. */
class Op {
  readonly id = ++lastId;
  private done = false;

  constructor(
    readonly op: OpName,
    readonly worker: number,
    readonly resource: string,
    extra: Partial<OpEvent> = {},
    time = now(),
  ) {
    this.emit('invoke', { ...extra, time });
  }

  ok(extra: Partial<OpEvent> = {}): void {
    this.complete('ok', extra);
  }

  fail(error: unknown, extra: Partial<OpEvent> = {}): void {
    this.complete('fail', { ...extra, error: describe(error) });
  }

  indeterminate(error: unknown): void {
    this.complete('indeterminate', { error: describe(error) });
  }

  private complete(type: OpEvent['type'], extra: Partial<OpEvent>): void {
    if (this.done) return;
    this.done = true;
    this.emit(type, extra);
  }

  private emit(type: OpEvent['type'], extra: Partial<OpEvent>): void {
    send({
      type: 'op',
      event: {
        time: now(),
        ...extra,
        type,
        op: this.op,
        client: CLIENT,
        worker: this.worker,
        id: this.id,
        resource: this.resource,
      },
    });
  }
}

const { LockEngine, readWriteLock, semaphore } = (await import(
  pathToFileURL(values.engine).href
)) as EngineModule;
const engine = new LockEngine({
  nodes: values.nodes.split(','),
  ttl: TTL,
  waitTimeout: WAIT,
  nodeTimeout: Number(values['node-timeout']),
  fenceCounterTtl: Number(values['fence-ttl']),
  fenceCounter: values['fence-counter'] === 'resource' ? 'resource' : 'node',
  retry: { delay: 5, factor: 2, maxDelay: 40, jitter: 0.5 },
  logger: {
    warn: (message) => process.stderr.write(`warn: ${message}\n`),
    error: (message) => process.stderr.write(`error: ${message}\n`),
  },
});
const storeClient = new Redis(values.store, { maxRetriesPerRequest: 1, commandTimeout: 2000 });
const redisStore = new RedisFencedStore(storeClient);
const sqliteStore = new SqliteFencedStore(values.sqlite);

/** Which worker and acquisition each live lock belongs to, for its extension events. */
const owners = new WeakMap<Lock, { worker: number; acquire: number }>();
engine.on('extended', ({ lock, duration }) => {
  const owner = owners.get(lock);
  if (!owner) return;
  new Op('extend', owner.worker, lock.resources[0], { lock: owner.acquire }, now() - duration).ok({
    validUntil: absolute(lock.validUntil),
    token: lock.token,
  });
});
engine.on('lost', ({ lock, error }) => {
  const owner = owners.get(lock);
  if (!owner) return;
  new Op('extend', owner.worker, lock.resources[0], { lock: owner.acquire }).fail(error);
});

/**
 * Completes a fenced write's operation: ok when the store took it, fail when
 * its fence refused it (with whether the lock was still valid then), and
 * `onError` when the call failed.
 */
async function fencedWrite(
  lock: Lock,
  op: Op,
  write: () => boolean | Promise<boolean>,
  onError: 'fail' | 'indeterminate',
): Promise<void> {
  try {
    if (await write()) op.ok({ validAtEnd: lock.isHeld });
    else op.fail(REJECTED, { validAtEnd: lock.isHeld });
  } catch (error) {
    op[onError](error);
  }
}

/**
 * The store key a holding writes under: the resource, or for a permit its
 * slot (permits of one semaphore hold together; each slot has one holder).
 */
const storeKey = (lock: Lock, options: SectionOptions): string =>
  options.kind === 'permit' ? `${options.resource}#${(lock as Permit).slot}` : options.resource;

/**
 * The work under a lock: read the control counter, then write all three
 * stores. A reader only reads.
 */
async function critical(
  worker: number,
  lock: Lock,
  acquire: number,
  options: SectionOptions & { section?: string },
): Promise<void> {
  const resource = storeKey(lock, options);
  const token = lock.token!;
  const read = new Op('read:control', worker, resource, { lock: acquire, bound: CALL_BOUND });
  let value: number;
  try {
    value = await redisStore.readControl(resource);
    read.ok({ value });
  } catch (error) {
    read.fail(error);
    return;
  }
  // A careful client stops once it knows its lock is gone...
  if (!lock.isHeld) return;
  // ...but a pause can still strike between that check and the write.
  if (options.pauseAt === 'before-write') {
    send({ type: 'at', point: 'before-write', section: options.section ?? '' });
    process.kill(process.pid, 'SIGSTOP');
  }
  if (options.kind === 'read') return;
  const payload = `${CLIENT}:${acquire}`;
  const fenced = { token, lock: acquire, payload, bound: CALL_BOUND };

  // SQLite errors (SQLITE_BUSY and friends) roll the statement back; a Redis error leaves it unknown.
  const sqlite = new Op('write:sqlite', worker, resource, fenced);
  await fencedWrite(lock, sqlite, () => sqliteStore.write(resource, token, payload), 'fail');
  const redis = new Op('write:redis', worker, resource, fenced);
  await fencedWrite(lock, redis, () => redisStore.write(resource, token, payload), 'indeterminate');

  const control = new Op('write:control', worker, resource, {
    lock: acquire,
    value: value + 1,
    bound: CALL_BOUND,
  });
  try {
    await redisStore.writeControl(resource, value + 1);
    control.ok();
  } catch (error) {
    control.indeterminate(error);
  }
}

interface SectionOutcome {
  readonly acquired: boolean;
  readonly token?: number;
  readonly slot?: number;
  readonly error?: string;
}

type Options = NonNullable<Parameters<typeof engine.acquire>[1]>;

/** acquire() and using() of what a section holds: a lock, a read or write hold, a permit. */
function holdOf(options: SectionOptions): {
  acquire: (o: Options) => Promise<Lock>;
  using: (body: (lock: Lock) => Promise<void>, o: Options) => Promise<void>;
} {
  const { resource, kind } = options;
  if (kind === 'read' || kind === 'write') {
    const rw = readWriteLock(engine, resource);
    return { acquire: (o) => rw.acquire(kind, o), using: (body, o) => rw.using(kind, body, o) };
  }
  if (kind === 'permit') {
    const sem = semaphore(engine, resource, options.permits ?? 1);
    return { acquire: (o) => sem.acquire(o), using: (body, o) => sem.using(body, o) };
  }
  return {
    acquire: (o) => engine.acquire(resource, o),
    using: (body, o) => engine.using(resource, body, o),
  };
}

/** Acquire, hold, write the stores, release: every step recorded. */
async function section(
  worker: number,
  options: SectionOptions & { section?: string },
): Promise<SectionOutcome> {
  const { resource, kind } = options;
  const ttl = options.ttl ?? TTL;
  const waitTimeout = options.waitTimeout ?? WAIT;
  const acquireOptions = {
    ttl,
    waitTimeout,
    ...(options.attempts === undefined ? {} : { retry: { attempts: options.attempts } }),
  };
  const acquire = new Op('acquire', worker, resource, {
    bound: waitTimeout + ttl + ACQUIRE_SLACK,
    ...(kind ? { kind } : {}),
    ...(kind === 'permit' ? { permits: options.permits ?? 1 } : {}),
  });
  const hold = holdOf(options);
  let token: number | undefined;
  let slot: number | undefined;
  const body = async (lock: Lock) => {
    token = lock.token;
    slot = kind === 'permit' ? (lock as Permit).slot : undefined;
    owners.set(lock, { worker, acquire: acquire.id });
    acquire.ok({ token, validUntil: absolute(lock.validUntil), ...(slot ? { slot } : {}) });
    if (options.holdMs) await sleep(options.holdMs);
    await critical(worker, lock, acquire.id, options);
  };
  try {
    if (options.autoExtend) {
      let release: Op | undefined;
      await hold.using(async (lock) => {
        await body(lock);
        release = new Op('release', worker, resource, { lock: acquire.id, bound: CALL_BOUND });
      }, acquireOptions);
      release?.ok();
    } else {
      const lock = await hold.acquire(acquireOptions);
      await body(lock);
      const release = new Op('release', worker, resource, { lock: acquire.id, bound: CALL_BOUND });
      try {
        release.ok({ released: (await lock.release()).released });
      } catch (error) {
        release.fail(error);
      }
    }
    return { acquired: true, token, slot };
  } catch (error) {
    acquire.fail(error);
    return { acquired: token !== undefined, token, slot, error: describe(error) };
  }
}

/**
 * The connections the engine duplicates from its node clients (its release
 * subscribers), so that settleConnections() can wait for them too.
 */
const duplicates: Redis[] = [];
const duplicate = Redis.prototype.duplicate;
Redis.prototype.duplicate = function (this: Redis, ...args: Parameters<Redis['duplicate']>) {
  const copy = duplicate.apply(this, args);
  duplicates.push(copy);
  return copy;
};

/**
 * Waits (bounded) until `clients` are connected and in step again; resolves
 * whether they all are. The harness heals the network before it stops the
 * clients, and healing resets the connections a fault left out of step;
 * closing the engine while such a connection is still reconnecting can
 * leave it open, or reject ioredis' automatic re-subscription with nobody to
 * catch it (see test/chaos/README.md). The rotation of chaos-run.spec.ts
 * also waits for this before each phase, so that no attempt fails for a
 * reconnection.
 */
async function settleConnections(clients: readonly Redis[], timeoutMs = 5000): Promise<boolean> {
  // The resets are already in this process's sockets: let their read errors run first.
  await nextTurn();
  const settled = Promise.all(
    clients.map(async (client) => {
      if (client.status === 'end') return;
      // Right after a reset the socket is destroyed while the status still says 'ready'.
      if (client.status !== 'ready' || client.stream.destroyed) {
        await new Promise((resolve) => client.once('ready', resolve));
      }
      // Replies come in order: once the PING is answered, so is the re-subscription sent on 'ready'.
      await nextTurn();
      await client.ping();
    }),
  ).then(
    () => true,
    () => false,
  );
  return Promise.race([settled, sleep(timeoutMs, false, { ref: false })]);
}

const nodeClient = (i: number) => engine.nodes[i].client as Redis;

let stopping = false;
const running: Promise<unknown>[] = [];

async function loop(
  worker: number,
  resources: readonly string[],
  extendEvery: number,
): Promise<void> {
  // Each worker draws from its own generator, so its choices replay whatever the others do.
  const next = random(derivedSeed(SEED, worker));
  const pick = (n: number) => Math.floor(next() * n);
  for (let i = 1; !stopping; i++) {
    const resource = resources[pick(resources.length)];
    // Now and then a section outlives its lease and relies on automatic extension.
    const long = extendEvery > 0 && i % extendEvery === 0;
    const hold = pick(4);
    const pause = pick(5);
    await section(worker, {
      resource,
      autoExtend: long,
      holdMs: long ? Math.round(TTL * 1.5) : hold,
    });
    await sleep(pause);
  }
}

process.on('unhandledRejection', (reason) => {
  process.stderr.write(`unhandled rejection: ${describe(reason)}\n`);
  process.exit(70);
});

await engine.connect();
send({ type: 'ready', pid: process.pid });

/** Stops the workers once their sections end, then closes the engine and the stores. */
async function shutdown(): Promise<void> {
  stopping = true;
  await Promise.all(running);
  await settleConnections([...engine.nodes.map((_, i) => nodeClient(i)), ...duplicates]);
  await engine.close();
  await storeClient.quit().catch(() => storeClient.disconnect());
  sqliteStore.close();
  send({ type: 'closed' });
}

// After 'closed' the harness looks at what the nodes still see of this process, then ends
// stdin: with nothing left open, the process exits on its own.
let sections = 0;
for await (const line of createInterface({ input: process.stdin })) {
  if (!line.trim() || stopping) continue;
  const command = JSON.parse(line) as ClientCommand;
  if (command.cmd === 'stop') {
    await shutdown();
  } else if (command.cmd === 'settle') {
    send({ type: 'settled', ready: await settleConnections(command.nodes.map(nodeClient)) });
  } else if (command.cmd === 'loop') {
    for (let w = 0; w < command.workers; w++) {
      running.push(loop(w, command.resources, command.extendEvery ?? 5));
    }
  } else if (command.cmd === 'section') {
    const worker = 100 + sections++;
    running.push(
      section(worker, command).then((outcome) =>
        send({ type: 'done', section: command.section, ...outcome }),
      ),
    );
  }
}
