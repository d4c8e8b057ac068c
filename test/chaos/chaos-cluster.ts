/**
 * The chaos harness: five independent redis-server nodes (AOF, fsync always,
 * noeviction: the harness defaults), a fault proxy in front of each, a
 * separate redis-server for the fenced Redis store and the control counter,
 * an SQLite file for the fenced table, and lock clients in their own
 * processes that reach the nodes only through the proxies.
 *
 * It records every fault it injects and every operation the clients report,
 * and `finish()` hands the whole history to the checker together with what
 * the stores kept and what the nodes still hold.
 */
import type { ChildProcess } from 'node:child_process';
import { EventEmitter, once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { LockEngine } from '../../lib/engine/index.js';
import { ACQUIRE, EXTEND, FENCE_WRITEBACK, RELEASE } from '../../lib/engine/lua-scripts.js';
import { RedisNodeProcess, stopRedisNodes } from '../../dev/redis/redis-nodes.js';
import { waitForProcState } from '../../dev/processes.js';
import { bundleScript, spawnScript } from '../../dev/scripts.js';
import { engineReady } from '../support/engine-ready.js';
import {
  check,
  operations,
  type CheckInput,
  type CheckResult,
  type ClientFate,
} from './checker.js';
import { buildClockShim, shiftedClockEnv } from './clock-shim.js';
import type { EngineBuild } from './engine-variants.js';
import { FaultProxy, PASS, type Fault } from './fault-proxy.js';
import {
  clockOrigin,
  now,
  WallClockWatch,
  type ClientCommand,
  type ClientMessage,
  type FaultEvent,
  type NodeResidue,
  type OpEvent,
  type SectionOptions,
  type WallClockStep,
} from './history.js';
import { derivedSeed } from './seeded.js';
import { RedisFencedStore, SqliteFencedStore } from './stores.js';

const clientScript = fileURLToPath(new URL('./chaos-client.ts', import.meta.url));

/** The clients' lease unless told otherwise, in ms: short, so that faults outlast it. */
const DEFAULT_TTL = 300;

/** The engine's scripts, loaded on every node up front so no NOSCRIPT round trip blurs a trap. */
const SCRIPTS = [ACQUIRE, FENCE_WRITEBACK, EXTEND, RELEASE];

/** Markers that identify a script call on one resource in a node's request stream. */
export const scriptCall = (
  script: { readonly sha: string },
  resource: string,
  keyPrefix = 'lock:',
): string[] => [script.sha, `${keyPrefix}{${resource}}`];

export interface ClientOptions {
  readonly engine: EngineBuild;
  /** Lease in ms. Default DEFAULT_TTL (300). */
  readonly ttl?: number;
  /** Default 2000. */
  readonly waitTimeout?: number;
  /** Default 100. */
  readonly nodeTimeout?: number;
  /** Default 0: exact counters counting from 1. */
  readonly fenceCounterTtl?: number;
  /** Default 'node' (the engine's default). */
  readonly fenceCounter?: 'node' | 'resource';
}

export interface SectionDone {
  readonly acquired: boolean;
  readonly token?: number;
  /** A permit's slot. */
  readonly slot?: number;
  readonly error?: string;
}

interface Deferred<T> {
  readonly promise: Promise<T>;
  resolve(value: T): void;
  reject(error: unknown): void;
}

function deferred<T>(): Deferred<T> {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  // Whoever awaits it sees the rejection; nobody awaiting it is no error (a killed client's sections).
  promise.catch(() => undefined);
  return { promise, resolve, reject };
}

class TimedOut extends Error {}

/** `promise`, or a rejection naming `what` when it takes longer than `ms`. */
export function deadline<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new TimedOut(`chaos: timed out after ${ms} ms waiting for ${what}`)),
      ms,
    );
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

/** Whether `promise` settled within `ms` (a rejection counts as settled). */
async function within(promise: Promise<unknown>, ms: number): Promise<boolean> {
  try {
    await deadline(promise, ms, '');
  } catch (error) {
    return !(error instanceof TimedOut);
  }
  return true;
}

/** One lock client process (chaos-client.ts). */
export class ChaosClient {
  pid = 0;
  stderr = '';
  killedAt: number | undefined;
  crashed: string | undefined;
  /** Whether its workers loop (loop()). */
  looping = false;
  private readonly sections = new Map<string, Deferred<SectionDone>>();
  /** Sections with a pause point, until they reach it. */
  private readonly pausePoints = new Map<string, Deferred<string>>();
  private readonly ready = deferred<void>();
  private readonly closed = deferred<void>();
  /** settle() calls waiting for their answer, in order. */
  private readonly settling: Deferred<boolean>[] = [];
  private readonly exited: Promise<void>;
  private stopping = false;
  private pauseFault: FaultEvent | undefined;
  private sectionCount = 0;

  constructor(
    private readonly cluster: ChaosCluster,
    readonly id: string,
    private readonly child: ChildProcess,
  ) {
    createInterface({ input: child.stdout! }).on('line', (line) => this.receive(line));
    // The end of it says why a client failed.
    child.stderr!.on('data', (chunk: Buffer) => {
      this.stderr = (this.stderr + chunk.toString()).slice(-20_000);
    });
    this.exited = once(child, 'close').then(() => {
      const { exitCode, signalCode } = child;
      if (
        this.crashed === undefined &&
        this.killedAt === undefined &&
        !(this.stopping && exitCode === 0)
      ) {
        this.crashed = `exited (${signalCode ?? exitCode}): ${this.stderr.slice(-2000)}`;
      }
      const error = new Error(`client ${id} exited: ${this.crashed ?? 'killed'}`);
      this.ready.reject(error);
      this.closed.reject(error);
      for (const settled of this.settling.splice(0)) settled.reject(error);
      for (const pending of this.sections.values()) pending.reject(error);
      for (const point of this.pausePoints.values()) point.reject(error);
    });
  }

  get alive(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** Resolves once the engine connected. */
  started(): Promise<void> {
    return this.ready.promise;
  }

  /** Runs `workers` loops over `resources` until stop(). */
  loop(workers: number, resources: readonly string[], extendEvery?: number): void {
    this.looping = true;
    this.send({ cmd: 'loop', workers, resources, extendEvery });
  }

  /**
   * Starts one critical section; `done` settles when it has ended. With
   * `pauseAt`, `stopped` resolves once the client stopped itself there (the
   * stop is recorded as a fault until resume()), and rejects if the section
   * ended without getting there.
   */
  section(options: SectionOptions): {
    readonly name: string;
    readonly done: Promise<SectionDone>;
    readonly stopped: Promise<void>;
  } {
    const name = `${this.id}/s${++this.sectionCount}`;
    this.cluster.noteLease(options.ttl);
    const pending = deferred<SectionDone>();
    this.sections.set(name, pending);
    const point = deferred<string>();
    if (options.pauseAt) this.pausePoints.set(name, point);
    else point.reject(new Error(`${name} has no pause point`));
    const stopped = Promise.race([
      point.promise,
      pending.promise.then((): never => {
        throw new Error(`${name} ended without reaching its pause point`);
      }),
    ]).then(async (at) => {
      await waitForProcState(this.pid, (state) => state === 'T', `client ${this.id}`);
      this.pauseFault = this.cluster.recordFault('pause-client', this.id, at);
    });
    stopped.catch(() => undefined);
    this.send({ cmd: 'section', section: name, ...options });
    return { name, done: pending.promise, stopped };
  }

  /**
   * Resolves once the client's engine is connected to `nodes` (indices)
   * again, after the faults that reset its connections were lifted.
   */
  async settle(nodes: readonly number[]): Promise<void> {
    const settled = deferred<boolean>();
    this.settling.push(settled);
    this.send({ cmd: 'settle', nodes });
    if (!(await settled.promise)) {
      throw new Error(`client ${this.id} did not reconnect to nodes ${nodes.join(', ')}`);
    }
  }

  /** SIGSTOP, resolved once the kernel shows the process stopped. */
  async pause(note?: string): Promise<void> {
    this.child.kill('SIGSTOP');
    await waitForProcState(this.pid, (state) => state === 'T', `client ${this.id}`);
    this.pauseFault = this.cluster.recordFault('pause-client', this.id, note);
  }

  async resume(): Promise<void> {
    this.child.kill('SIGCONT');
    await waitForProcState(this.pid, (state) => state !== 'T', `client ${this.id}`);
    if (this.pauseFault) this.pauseFault.end = now();
    this.pauseFault = undefined;
  }

  /** SIGKILL: its open operations become indeterminate. */
  async kill(note?: string): Promise<void> {
    if (!this.alive) return;
    this.killedAt = now();
    this.cluster.recordFault('kill-client', this.id, note).end = this.killedAt;
    this.child.kill('SIGKILL');
    if (this.pauseFault) this.pauseFault.end = this.killedAt;
    await this.exited;
  }

  /**
   * Lets the workers finish their sections and the client close its engine
   * and stores; resolves once it says it has (it still runs, so that what
   * its engine left open can be seen). A client that cannot close in time is
   * killed and reported.
   */
  async stop(timeoutMs = 15_000): Promise<void> {
    if (!this.alive) return;
    if (this.pauseFault) await this.resume();
    this.stopping = true;
    this.send({ cmd: 'stop' });
    if (!(await within(this.closed.promise, timeoutMs))) {
      // A client that cannot stop has a call that never ends: the checker reports it.
      await this.crash(`did not close within ${timeoutMs} ms`);
    }
  }

  /**
   * Ends the client's stdin, after which it has nothing left to do: it must
   * exit on its own. One that does not was kept alive by something its
   * engine left open; it is killed and reported.
   */
  async exit(timeoutMs = 5_000): Promise<void> {
    if (!this.alive) return;
    this.stopping = true;
    this.child.stdin!.end();
    if (!(await within(this.exited, timeoutMs))) {
      await this.crash(`did not exit within ${timeoutMs} ms of closing (a handle left open)`);
    }
  }

  private async crash(reason: string): Promise<void> {
    this.crashed = `${reason}: ${this.stderr.slice(-2000)}`;
    this.child.kill('SIGKILL');
    await this.exited;
  }

  private send(command: ClientCommand): void {
    if (this.alive && this.child.stdin!.writable) {
      this.child.stdin!.write(`${JSON.stringify(command)}\n`);
    }
  }

  private receive(line: string): void {
    let message: ClientMessage;
    try {
      message = JSON.parse(line) as ClientMessage;
    } catch {
      this.stderr += `unparsable output: ${line}\n`;
      return;
    }
    switch (message.type) {
      case 'ready':
        this.pid = message.pid;
        this.ready.resolve();
        break;
      case 'op':
        this.cluster.record(message.event);
        break;
      case 'at':
        this.pausePoints.get(message.section)?.resolve(message.point);
        this.pausePoints.delete(message.section);
        break;
      case 'done': {
        const pending = this.sections.get(message.section);
        this.sections.delete(message.section);
        this.pausePoints.delete(message.section);
        pending?.resolve(message);
        break;
      }
      case 'settled':
        this.settling.shift()?.resolve(message.ready);
        break;
      case 'closed':
        this.closed.resolve();
        break;
    }
  }
}

export interface ClusterOptions {
  /** Indices of nodes started with the clock-shift shim, whose wall clock can be stepped. */
  readonly clockShifted?: readonly number[];
  /** What the clients' choices follow (each client gets its own seed from it). Default 1. */
  readonly seed?: number;
}

export interface Finished {
  readonly result: CheckResult;
  readonly seconds: number;
  /** Steps of the host's wall clock seen during the run. */
  readonly wallClockSteps: readonly WallClockStep[];
  /** What the checker was given, to judge the same run differently (a control). */
  readonly input: CheckInput;
}

/** Five nodes behind five proxies, the stores, the clients and the history. */
export class ChaosCluster extends EventEmitter {
  readonly events: OpEvent[] = [];
  faults: FaultEvent[] = [];
  clients: ChaosClient[] = [];
  /** A direct (unproxied) engine for inspection and re-seeding; exact counters. */
  admin!: LockEngine;
  private storeClient!: Redis;
  private readonly proxyFaults = new Map<number, FaultEvent>();
  private readonly nodeFaults = new Map<string, FaultEvent>();
  private readonly shiftFiles = new Map<number, string>();
  /** How far each shifted node's wall clock is ahead, in ms. */
  private readonly shifts = new Map<number, number>();
  private readonly wallClock = new WallClockWatch();
  private run = 0;
  private started = now();
  private clientCount = 0;
  /** Grants per resource ('' for all), counted as they come. */
  private readonly grantCount = new Map<string, number>();
  /** `client/acquire` of the grants whose release has not begun. */
  private readonly held = new Set<string>();
  private maxLease = 0;

  private constructor(
    readonly dir: string,
    readonly nodes: RedisNodeProcess[],
    readonly proxies: FaultProxy[],
    readonly store: RedisNodeProcess,
    private readonly seed: number,
  ) {
    super();
    this.setMaxListeners(100);
  }

  static async start(options: ClusterOptions = {}): Promise<ChaosCluster> {
    const dir = mkdtempSync(join(tmpdir(), 'redis-lock-chaos-'));
    const nodes: RedisNodeProcess[] = [];
    const proxies: FaultProxy[] = [];
    let cluster: ChaosCluster | undefined;
    try {
      const shifted = options.clockShifted ?? [];
      const shim = shifted.length > 0 ? buildClockShim(dir) : undefined;
      const shiftFiles = new Map<number, string>();
      const starts = Array.from({ length: 5 }, (_, i) => {
        if (!shim || !shifted.includes(i)) return RedisNodeProcess.start();
        const file = join(dir, `clock-shift-${i}`);
        shiftFiles.set(i, file);
        return RedisNodeProcess.start({ env: shiftedClockEnv(shim, file) });
      });
      starts.push(RedisNodeProcess.start());
      const settled = await Promise.allSettled(starts);
      for (const s of settled) if (s.status === 'fulfilled') nodes.push(s.value);
      const failure = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
      if (failure) throw failure.reason;
      const store = nodes.pop()!;
      for (const node of nodes) proxies.push(await FaultProxy.start(node.port));
      cluster = new ChaosCluster(dir, nodes, proxies, store, options.seed ?? 1);
      for (const [i, file] of shiftFiles) cluster.shiftFiles.set(i, file);
      cluster.admin = new LockEngine({
        nodes: nodes.map((n) => n.url),
        fenceCounterTtl: 0,
        checkNodes: false,
        releaseNotifications: false,
        logger: { warn: () => undefined, error: () => undefined },
      });
      await cluster.admin.connect();
      cluster.storeClient = new Redis(store.url, { maxRetriesPerRequest: 1 });
      await cluster.reset();
      return cluster;
    } catch (error) {
      await cluster?.admin?.close();
      cluster?.storeClient?.disconnect();
      await Promise.all(proxies.map((p) => p.close()));
      await stopRedisNodes([...nodes]);
      rmSync(dir, { recursive: true, force: true });
      throw error;
    }
  }

  get proxyUrls(): string[] {
    return this.proxies.map((p) => p.url);
  }

  get sqlitePath(): string {
    return join(this.dir, `store-${this.run}.db`);
  }

  /** A clean slate between runs: nodes up and healed, data flushed, history cleared. */
  async reset(): Promise<void> {
    await Promise.all(this.clients.map((c) => c.kill()));
    this.clients = [];
    await this.heal();
    for (const [i, file] of this.shiftFiles) {
      writeFileSync(file, '0');
      this.shifts.set(i, 0);
    }
    await Promise.all([...this.nodes, this.store].map((n) => n.cli('FLUSHALL')));
    await Promise.all(this.nodes.map((n) => this.loadScripts(n)));
    this.run++;
    new SqliteFencedStore(this.sqlitePath, true).close();
    this.events.length = 0;
    this.grantCount.clear();
    this.held.clear();
    this.faults = [];
    this.maxLease = 0;
    this.started = now();
    this.wallClock.start();
  }

  async startClient(options: ClientOptions): Promise<ChaosClient> {
    const id = `c${++this.clientCount}`;
    this.noteLease(options.ttl ?? DEFAULT_TTL);
    // A plain Node process (spawnScript leaves out Jest's NODE_OPTIONS); the engine it loads is
    // bundled as its script is.
    const child = spawnScript(clientScript, {
      dieWithParent: true,
      args: [
        '--id',
        id,
        '--engine',
        bundleScript(options.engine.entry),
        '--nodes',
        this.proxyUrls.join(','),
        '--store',
        this.store.url,
        '--sqlite',
        this.sqlitePath,
        '--ttl',
        String(options.ttl ?? DEFAULT_TTL),
        '--wait-timeout',
        String(options.waitTimeout ?? 2000),
        '--node-timeout',
        String(options.nodeTimeout ?? 100),
        '--fence-ttl',
        String(options.fenceCounterTtl ?? 0),
        '--fence-counter',
        options.fenceCounter ?? 'node',
        '--seed',
        String(derivedSeed(this.seed, id)),
        '--clock-origin',
        String(clockOrigin()),
      ],
    });
    const client = new ChaosClient(this, id, child);
    this.clients.push(client);
    await client.started();
    return client;
  }

  async startClients(count: number, options: ClientOptions): Promise<ChaosClient[]> {
    return Promise.all(Array.from({ length: count }, () => this.startClient(options)));
  }

  /** @internal Called by the clients for every operation event. */
  record(event: OpEvent): void {
    this.events.push(event);
    if (event.op === 'acquire' && event.type === 'ok') {
      this.grantCount.set('', (this.grantCount.get('') ?? 0) + 1);
      this.grantCount.set(event.resource, (this.grantCount.get(event.resource) ?? 0) + 1);
      this.held.add(`${event.client}/${event.id}`);
    } else if (event.op === 'release' && event.type === 'invoke') {
      this.held.delete(`${event.client}/${event.lock}`);
    }
    this.emit('progress');
  }

  recordFault(
    kind: string,
    target: string,
    note?: string,
    extra: Partial<FaultEvent> = {},
  ): FaultEvent {
    const fault: FaultEvent = { kind, target, start: now(), ...(note ? { note } : {}), ...extra };
    this.faults.push(fault);
    return fault;
  }

  /** Granted acquisitions so far (of `resource`, when given). */
  grants(resource?: string): number {
    return this.grantCount.get(resource ?? '') ?? 0;
  }

  /**
   * Resolves once `condition` holds, re-checked on every operation the
   * clients report; rejects naming `what` after `timeoutMs`. Once it held,
   * it is not called again: a condition that records what it saw keeps
   * that, even though more operations of the same read of client lines
   * arrive before the listener is gone.
   */
  until(condition: () => boolean, timeoutMs: number, what: string): Promise<void> {
    let onProgress: (() => void) | undefined;
    let held = false;
    const met = new Promise<void>((resolve) => {
      onProgress = () => {
        if (held || !condition()) return;
        held = true;
        resolve();
      };
      this.on('progress', onProgress);
      onProgress();
    });
    return deadline(met, timeoutMs, what).finally(() => this.off('progress', onProgress!));
  }

  /** Whether `client` holds a lock: it was granted one and has not begun to release it. */
  holds(client: ChaosClient): boolean {
    for (const grant of this.held) if (grant.startsWith(`${client.id}/`)) return true;
    return false;
  }

  /** Acquisitions invoked at or after `from` (shared time line) that have ended so far, by outcome. */
  acquisitionsSince(from: number): { granted: number; failed: number } {
    const ended = operations(this.events).filter(
      (o) => o.invoke.op === 'acquire' && o.invoke.time >= from,
    );
    return {
      granted: ended.filter((o) => o.outcome === 'ok').length,
      failed: ended.filter((o) => o.outcome === 'fail').length,
    };
  }

  /** Resolves after `count` more grants (on each of `resources`, when given). */
  async moreGrants(
    count: number,
    timeoutMs: number,
    what: string,
    resources?: readonly string[],
  ): Promise<void> {
    const keys = resources ?? [undefined];
    const from = keys.map((r) => this.grants(r));
    await this.until(
      () => keys.every((r, i) => this.grants(r) >= from[i] + count),
      timeoutMs,
      `${count} more grant(s) ${what}`,
    );
  }

  // --- Faults ---------------------------------------------------------------

  /** Sets proxy `i`'s fault (PASS lifts it), recording its interval. */
  setFault(i: number, fault: Fault): void {
    const open = this.proxyFaults.get(i);
    // The same fault again goes on as one.
    if (JSON.stringify(fault) === JSON.stringify(this.proxies[i].fault)) return;
    if (open) {
      open.end = now();
      this.proxyFaults.delete(i);
    }
    this.proxies[i].set(fault);
    if (fault.kind !== 'pass') {
      const note = fault.kind === 'delay' ? `${fault.ms} ms ${fault.direction ?? 'replies'}` : '';
      this.proxyFaults.set(i, this.recordFault(fault.kind, `proxy${i}`, note));
    }
  }

  /** Blackholes every node but `reachable`. */
  partition(reachable: readonly number[]): void {
    this.proxies.forEach((_, i) =>
      this.setFault(i, reachable.includes(i) ? PASS : { kind: 'blackhole' }),
    );
  }

  /** Every proxy passes and every node runs. */
  async heal(): Promise<void> {
    this.proxies.forEach((proxy, i) => {
      proxy.disarm();
      this.setFault(i, PASS);
    });
    await Promise.all(this.nodes.map((_, i) => this.ensureNode(i)));
  }

  async killNode(i: number, note?: string): Promise<void> {
    this.nodeFaults.set(`kill${i}`, this.recordFault('kill-node', `node${i}`, note));
    await this.nodes[i].kill();
  }

  /** Starts a killed node again from its AOF. */
  async restartNode(i: number): Promise<void> {
    await this.nodes[i].restart();
    await this.loadScripts(this.nodes[i]);
    await engineReady(this.admin);
    this.endNodeFault(`kill${i}`);
  }

  async pauseNode(i: number, note?: string): Promise<void> {
    await this.nodes[i].pause();
    this.nodeFaults.set(`pause${i}`, this.recordFault('pause-node', `node${i}`, note));
  }

  async resumeNode(i: number): Promise<void> {
    await this.nodes[i].resume();
    this.endNodeFault(`pause${i}`);
  }

  /** Kills node `i`, removes its data (the AOF) and starts it empty. */
  async wipeNode(i: number): Promise<void> {
    const fault = this.recordFault('wipe-node', `node${i}`, 'data dir removed');
    const node = this.nodes[i];
    await node.kill();
    rmSync(join(node.dir, 'appendonlydir'), { recursive: true, force: true });
    await node.restart();
    await this.loadScripts(node);
    await engineReady(this.admin);
    fault.end = now();
  }

  /**
   * Steps the wall clocks of nodes `indices` `ms` forward (backward when
   * negative), as a time sync that steps instead of slewing would. The
   * nodes must run with the shim. Recorded as an instant per node, which
   * the checker weighs against the overlaps it finds.
   */
  stepClocks(indices: readonly number[], ms: number): void {
    for (const i of indices) {
      if (!this.shiftFiles.has(i))
        throw new Error(`node ${i} was not started with the clock-shift shim`);
    }
    for (const i of indices) {
      const shift = (this.shifts.get(i) ?? 0) + ms;
      writeFileSync(this.shiftFiles.get(i)!, String(shift));
      this.shifts.set(i, shift);
      const note = `${ms > 0 ? '+' : ''}${ms} ms`;
      const fault = this.recordFault('clock-step', `node${i}`, note, { stepMs: ms });
      fault.end = fault.start;
    }
  }

  /** The wall clock node `i` reports (TIME), in epoch ms. */
  async nodeTime(i: number): Promise<number> {
    const [seconds, micros] = (await this.nodes[i].cli('TIME')).split('\n').map(Number);
    return seconds * 1000 + micros / 1000;
  }

  /** Arms a trap on each listed proxy; each resolves with the connection it caught. */
  trap(indices: readonly number[], markers: readonly string[], hold: 'requests' | 'replies') {
    return indices.map((i) => this.proxies[i].trap(markers, hold));
  }

  disarm(): void {
    for (const proxy of this.proxies) proxy.disarm();
  }

  // --- The end of a run -----------------------------------------------------

  /**
   * Lifts every fault, stops the clients, looks at what their closed
   * engines left on the nodes, lets them exit, and checks the whole history.
   */
  async finish(): Promise<Finished> {
    // Healed first: the clients close their engines with every node reachable.
    this.disarm();
    await this.heal();
    await Promise.all(this.clients.map((c) => c.stop()));
    this.wallClock.stop();
    for (const f of this.faults) f.end ??= now();
    const residue = await this.residue();
    await Promise.all(this.clients.map((c) => c.exit()));
    const sqlite = new SqliteFencedStore(this.sqlitePath);
    const sqliteSnapshot = sqlite.snapshot();
    sqlite.close();
    const redis = await new RedisFencedStore(this.storeClient).snapshot();
    const clients = new Map<string, ClientFate>(
      this.clients.map((c) => [c.id, { killedAt: c.killedAt, crashed: c.crashed }]),
    );
    const input: CheckInput = {
      events: [...this.events],
      faults: this.faults,
      clients,
      stores: [sqliteSnapshot, redis.store],
      control: redis.control,
      residue,
      nodes: this.nodes.length,
      hostClockSteps: [...this.wallClock.steps],
    };
    return {
      result: check(input),
      input,
      seconds: (now() - this.started) / 1000,
      wallClockSteps: [...this.wallClock.steps],
    };
  }

  /** @internal The longest lease asked for in this run, for the residue check. */
  noteLease(ms: number | undefined): void {
    if (ms !== undefined) this.maxLease = Math.max(this.maxLease, ms);
  }

  /**
   * What the clients left behind once they closed their engines (they still
   * run): connections (all of theirs go through the proxies), subscribers to
   * lock channels, and lock keys that no lease will remove.
   */
  private async residue(): Promise<NodeResidue[]> {
    await Promise.all(this.proxies.map((proxy) => proxy.drained(3000)));
    return Promise.all(
      this.nodes.map(async (node, i): Promise<NodeResidue> => {
        const client = this.admin.nodes[i].client as Redis;
        // Fence counters are meant to last; every other key of the engine's must expire, and a
        // lock key within a lease.
        const keys = (await client.keys('lock:*')).filter((key) => !key.endsWith(':fence'));
        const ttls = await Promise.all(keys.map((key) => client.pttl(key)));
        const leaked = (key: string, ttl: number) =>
          ttl === -1 || (key.endsWith('}') && ttl > this.maxLease);
        return {
          node: `node${i}`,
          lockKeys: keys.filter((key, k) => leaked(key, ttls[k])),
          subscribers: await lockSubscribers(client),
          connections: this.proxies[i].openConnections,
        };
      }),
    );
  }

  /** Kills every client, stops every node and proxy, removes the temp dir. */
  async stop(): Promise<void> {
    this.wallClock.stop();
    await Promise.all(this.clients.map((c) => c.kill()));
    await this.admin?.close().catch(() => undefined);
    this.storeClient?.disconnect();
    await Promise.all(this.proxies.map((p) => p.close()));
    await stopRedisNodes([...this.nodes, this.store]);
    rmSync(this.dir, { recursive: true, force: true });
  }

  private async ensureNode(i: number): Promise<void> {
    const node = this.nodes[i];
    const wasDown = !node.isRunning;
    await node.ensureRunning();
    if (wasDown) {
      await this.loadScripts(node);
      await engineReady(this.admin);
    }
    this.endNodeFault(`kill${i}`);
    this.endNodeFault(`pause${i}`);
  }

  private endNodeFault(key: string): void {
    const fault = this.nodeFaults.get(key);
    if (fault) fault.end = now();
    this.nodeFaults.delete(key);
  }

  private async loadScripts(node: RedisNodeProcess): Promise<void> {
    for (const script of SCRIPTS) await node.cli('SCRIPT', 'LOAD', script.source);
  }
}

/**
 * Channels with subscribers among the lock keys. The proxy has closed the
 * clients' connections by now, but the server may take a moment to notice:
 * asked again for up to a second while any are left (there is no event to
 * await for that).
 */
async function lockSubscribers(client: Redis): Promise<number> {
  const deadline = performance.now() + 1000;
  for (;;) {
    const channels = (await client.pubsub('CHANNELS', 'lock:*')) as string[];
    if (channels.length === 0 || performance.now() > deadline) return channels.length;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
