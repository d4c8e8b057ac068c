import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { findRedisServer, startRedisNodes } from '../../../dev/redis/redis-nodes.js';
import { FlashSaleStore } from '../store/flash-sale.store.js';
import { startFleet, stopFleet, type AppInstance } from './fleet.js';
import { runLoad, type LoadResult } from './load.js';
import { formatCount, textTable } from '../../../dev/text.js';
import { bar, ms, type Output } from './output.js';
import type { ProcessRegistry } from './processes.js';
import {
  runZombie,
  zombieProblem,
  type Reply,
  type StockVariant,
  type ZombieResult,
} from './zombie.js';

export const PRODUCT = { id: 1, name: 'Limited sneakers' } as const;

export interface DemoSettings {
  /** Purchase requests per run. */
  readonly requests: number;
  /** Requests in flight at once, over all instances. */
  readonly concurrency: number;
  readonly instances: number;
  readonly redisNodes: number;
  readonly stock: number;
  /** Latency of the payment step at checkout. */
  readonly paymentMs: number;
  /** Lease of the lock on the zombie scene's instances: short, so it runs out quickly. */
  readonly zombieLeaseMs: number;
  /** Latency of the payment on the zombie scene's instances: the window the holders are frozen in. */
  readonly zombiePaymentMs: number;
}

export const DEMO_DEFAULTS: DemoSettings = Object.freeze({
  requests: 2000,
  concurrency: 200,
  instances: 5,
  redisNodes: 3,
  stock: 10,
  paymentMs: 5,
  zombieLeaseMs: 300,
  zombiePaymentMs: 100,
});

export interface DemoOptions extends DemoSettings {
  /** The compiled app; default: `sample/dist/sample/flash-sale/main.js` of this repository. */
  readonly appEntry?: string;
  /** Where the database, the logs and the Redis data go. */
  readonly workDir: string;
  /** Tracks every process started, so the caller can stop them all, also on Ctrl-C. */
  readonly registry: ProcessRegistry;
  readonly out: Output;
}

export interface RunSummary {
  readonly mode: 'unlocked' | 'locked';
  readonly requests: number;
  readonly stock: number;
  /** Paid orders in the database. */
  readonly sold: number;
  readonly stockLeft: number;
  /** Units sold beyond the stock. */
  readonly oversold: number;
  /** Answered 409: the item was held by another buyer's checkout. */
  readonly busy: number;
  /** Answered 410. */
  readonly soldOut: number;
  /** Writes refused by their fencing token (recorded in the database). */
  readonly fencingRejections: number;
  readonly errors: number;
  readonly latencyMs: LoadResult['latencyMs'];
  readonly durationMs: number;
  readonly errorSamples: readonly string[];
}

export interface Check {
  readonly name: string;
  readonly ok: boolean;
  /** Required checks decide the exit code; the others are reported. */
  readonly required: boolean;
}

export interface DemoSummary {
  readonly ok: boolean;
  readonly checks: readonly Check[];
  readonly settings: DemoSettings;
  readonly runs: { readonly unlocked: RunSummary; readonly locked: RunSummary };
  /** The zombie scene, once per way of writing the stock: unfenced, write-only, claimed. */
  readonly zombies: readonly ZombieResult[];
  readonly durationMs: number;
}

/**
 * The whole demo: 3 Redis nodes, one SQLite file, 5 app instances; the
 * flash sale without a lock, then with it; then the zombie. Stops the app
 * instances it is done with; the caller stops the rest through the registry.
 */
export async function runDemo(options: DemoOptions): Promise<DemoSummary> {
  const { out, registry, workDir } = options;
  const started = performance.now();
  const entry = options.appEntry ?? defaultAppEntry();
  findRedisServer(); // says how to install it, before anything starts
  if (!existsSync(entry)) {
    throw new Error(
      `${entry} does not exist: build the sample first (npm run build && npm run build:sample).`,
    );
  }

  out.line(
    out.bold(
      `Flash sale: ${formatCount(options.stock)} × ${PRODUCT.name}, ${formatCount(options.requests)} buyers, ` +
        `${options.instances} app instances, ${options.redisNodes} Redis nodes`,
    ),
  );
  out.line();
  // The harness's defaults are what fencing tokens need: AOF, appendfsync always,
  // noeviction. Own process groups, like the instances: a Ctrl-C reaches the
  // demo only, which stops them in order; nodes still starting then are killed
  // by the harness's own 'exit' hook.
  const nodes = await startRedisNodes(options.redisNodes, { detached: true });
  for (const node of nodes) registry.add(node);
  out.line(
    '  ' +
      out.ok(
        `${nodes.length} Redis nodes (AOF, appendfsync always): ${nodes.map((n) => n.url.replace('redis://', '')).join(', ')}`,
      ),
  );
  const dbFile = join(workDir, 'flash-sale.sqlite');
  const store = FlashSaleStore.open(dbFile);
  out.line('  ' + out.ok(`SQLite store shared by every instance (WAL, busy_timeout): ${dbFile}`));

  const env = {
    LOCK_NODES: nodes.map((n) => n.url).join(','),
    DB_FILE: dbFile,
    PAYMENT_MS: String(options.paymentMs),
  };
  const fleet = (locks: 'on' | 'off') =>
    startFleet(
      {
        count: options.instances,
        entry,
        env: { ...env, LOCKS: locks },
        logDir: workDir,
        label: locks === 'on' ? 'locked' : 'unlocked',
      },
      registry,
    );

  try {
    out.line();
    out.line(out.bold('1/3  Without a lock (LOCKS=off)'));
    const unlockedFleet = await timed(out, `${options.instances} instances up`, () => fleet('off'));
    const unlocked = await flashSale('unlocked', unlockedFleet, store, options);

    out.line();
    out.line(out.bold(`2/3  With @Locked('product:<0>') (LOCKS=on)`));
    const [lockedFleet] = await Promise.all([
      timed(out, `${options.instances} instances up`, () => fleet('on')),
      stopFleet(unlockedFleet),
    ]);
    const locked = await flashSale('locked', lockedFleet, store, options);

    out.line();
    printResults(out, unlocked, locked);

    out.line();
    out.line(
      out.bold(
        '3/3  The zombie: an instance paused after reading the stock writes after its lease ran out',
      ),
    );
    // A pair of instances per way of writing the stock, with a short lease and a slow payment.
    const variants: StockVariant[] = ['unfenced', 'write-only', 'claimed'];
    const [pairs] = await Promise.all([
      timed(out, `${variants.length * 2} instances up (a pair per way of writing the stock)`, () =>
        Promise.all(
          variants.map((variant) =>
            startFleet(
              {
                count: 2,
                entry,
                env: {
                  ...env,
                  LOCKS: 'on',
                  LOCK_TTL_MS: String(options.zombieLeaseMs),
                  PAYMENT_MS: String(options.zombiePaymentMs),
                  STOCK_WRITES: variant,
                },
                logDir: workDir,
                label: `zombie-${variant}`,
              },
              registry,
            ),
          ),
        ),
      ),
      stopFleet(lockedFleet),
    ]);
    const zombies: ZombieResult[] = [];
    for (const [i, variant] of variants.entries()) {
      const [zombie, takeover] = pairs[i]!;
      zombies.push(
        await runZombie({
          zombie: zombie!,
          takeover: takeover!,
          variant,
          store,
          product: PRODUCT,
          stock: options.stock,
          leaseMs: options.zombieLeaseMs,
        }),
      );
    }
    printZombies(out, zombies);
    const claimed = zombies.find((z) => z.variant === 'claimed')!;
    const writeOnly = zombies.find((z) => z.variant === 'write-only')!;

    const checks: Check[] = [
      {
        name: `with the lock: 0 oversold (${locked.sold} sold, ${locked.stockLeft} left)`,
        ok: locked.oversold === 0,
        required: true,
      },
      {
        name: 'with the lock: every unit is either sold or in stock',
        ok: locked.sold > 0 && locked.sold + locked.stockLeft === options.stock,
        required: true,
      },
      {
        name:
          claimed.zombieToken !== undefined && claimed.takeoverToken !== undefined
            ? `claimed at the read: the zombie's write was refused (${claimed.zombieToken} < ${claimed.takeoverToken}), 0 lost updates`
            : "claimed at the read: the zombie's write was refused, 0 lost updates",
        ok: zombieProblem(claimed) === undefined,
        required: true,
      },
      {
        name: `fenced at the write only: the zombie's write went through, ${writeOnly.lostUpdates ?? '?'} lost update`,
        ok: zombieProblem(writeOnly) === undefined,
        required: true,
      },
      {
        name:
          unlocked.oversold > 0
            ? `without the lock: ${formatCount(unlocked.oversold)} oversold, the race the lock prevents`
            : 'without the lock the race was not provoked this time (0 oversold); try more --concurrency',
        ok: unlocked.oversold > 0,
        required: false,
      },
    ];
    const ok = checks.every((check) => check.ok || !check.required);
    out.line();
    out.line(out.bold('Result'));
    for (const check of checks) {
      out.line(
        `  ${check.ok ? out.ok(check.name) : check.required ? out.fail(check.name) : out.note(check.name)}`,
      );
    }
    return {
      ok,
      checks,
      settings: pickSettings(options),
      runs: { unlocked, locked },
      zombies,
      durationMs: Math.round(performance.now() - started),
    };
  } finally {
    store.close();
  }
}

async function flashSale(
  mode: 'unlocked' | 'locked',
  fleet: readonly AppInstance[],
  store: FlashSaleStore,
  options: DemoOptions,
): Promise<RunSummary> {
  const { out } = options;
  store.restock(PRODUCT.id, PRODUCT.name, options.stock);
  const load = await runLoad({
    targets: fleet.map((app) => app.url),
    path: `/products/${PRODUCT.id}/purchase`,
    requests: options.requests,
    concurrency: options.concurrency,
    onProgress: (c) =>
      out.progress(
        `  ${bar(c.done, options.requests)} ${formatCount(c.done)}/${formatCount(options.requests)}  ` +
          `sold ${c.sold}  busy ${c.busy}  sold out ${c.soldOut}  errors ${c.errors}`,
      ),
  });
  const audit = store.audit(PRODUCT.id);
  out.line(
    '  ' +
      (load.errors === 0 ? out.ok : out.fail).call(
        out,
        `${formatCount(load.requests)} purchases in ${ms(load.durationMs)}: ${formatCount(load.sold)} sold, ` +
          `${formatCount(load.busy)} busy, ${formatCount(load.soldOut)} sold out, ${formatCount(load.errors)} errors`,
      ),
  );
  for (const sample of load.errorSamples) out.line(`    ${out.dim(sample)}`);
  return {
    mode,
    requests: load.requests,
    stock: options.stock,
    sold: audit.sold,
    stockLeft: audit.stock,
    oversold: Math.max(0, audit.sold - options.stock),
    busy: load.busy,
    soldOut: load.soldOut,
    fencingRejections: audit.rejectedWrites,
    errors: load.errors,
    latencyMs: load.latencyMs,
    durationMs: load.durationMs,
    errorSamples: load.errorSamples,
  };
}

function printResults(out: Output, unlocked: RunSummary, locked: RunSummary): void {
  const row = (label: string, pick: (run: RunSummary) => string) => [
    label,
    pick(unlocked),
    pick(locked),
  ];
  const lines = textTable([
    ['', 'without lock', 'with lock'],
    row('requests', (r) => formatCount(r.requests)),
    row('sold', (r) => formatCount(r.sold)),
    row('stock left', (r) => formatCount(r.stockLeft)),
    row('oversold', (r) => formatCount(r.oversold)),
    row('answered 409 (busy)', (r) => formatCount(r.busy)),
    row('answered 410 (sold out)', (r) => formatCount(r.soldOut)),
    row('fencing rejections', (r) => formatCount(r.fencingRejections)),
    row('errors', (r) => formatCount(r.errors)),
    row('latency p50', (r) => ms(r.latencyMs.p50)),
    row('latency p95', (r) => ms(r.latencyMs.p95)),
    row('latency p99', (r) => ms(r.latencyMs.p99)),
    row('wall time', (r) => ms(r.durationMs)),
  ]);
  out.line(out.bold(lines[0]));
  for (const line of lines.slice(1)) out.line(line);
}

function printZombies(out: Output, zombies: readonly ZombieResult[]): void {
  const say = (text: string) => out.line(`  ${text}`);
  const first = zombies[0];
  if (first) {
    say(
      `Each pair: the first instance takes the lock, reads the stock (${first.stockBefore}) and starts charging;`,
    );
    say(
      `it freezes (SIGSTOP) and its ${first.leaseMs} ms lease runs out. The second gets the lock with a newer token,`,
    );
    say(
      'reads the same stock and starts charging; it is held there. The first thaws (SIGCONT) and writes, then the second.',
    );
  }
  const lines = textTable([
    ['stock write', 'tokens', 'zombie answers', 'sold', 'stock left', 'refused', 'lost updates'],
    ...zombies.map((z) => [
      z.variant === 'claimed'
        ? 'claimed at the read'
        : z.variant === 'write-only'
          ? 'fenced at the write only'
          : 'unfenced',
      z.zombieToken !== undefined && z.takeoverToken !== undefined
        ? `${z.zombieToken} → ${z.takeoverToken}`
        : '?',
      describeReply(z.zombieAnswer),
      formatCount(z.sold ?? 0),
      formatCount(z.stockAfter ?? 0),
      formatCount(z.refusedWrites ?? 0),
      formatCount(z.lostUpdates ?? 0),
    ]),
  ]);
  out.line(`  ${out.bold(lines[0]!)}`);
  for (const line of lines.slice(1)) say(line);
  for (const z of zombies) {
    const problem = zombieProblem(z);
    if (problem) say(out.fail(`${z.variant}: ${problem}`));
  }
}

function describeReply(reply: Reply | undefined): string {
  if (!reply) return 'nothing';
  return [reply.status, reply.code].filter((part) => part !== undefined).join(' ');
}

async function timed<T>(out: Output, what: string, task: () => Promise<T>): Promise<T> {
  const started = performance.now();
  const result = await task();
  out.line(`  ${out.ok(`${what} in ${ms(performance.now() - started)}`)}`);
  return result;
}

function pickSettings(options: DemoSettings): DemoSettings {
  const settings = {} as Record<string, unknown>;
  for (const key of Object.keys(DEMO_DEFAULTS)) settings[key] = options[key as keyof DemoSettings];
  return settings as unknown as DemoSettings;
}

/** `sample/dist/sample/flash-sale/main.js` of the repository this file is in (compiled or not). */
export function defaultAppEntry(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const manifest = join(dir, 'package.json');
    if (
      existsSync(manifest) &&
      (JSON.parse(readFileSync(manifest, 'utf8')) as { name?: string }).name === 'nestjs-redis-lock'
    ) {
      return join(dir, 'sample', 'dist', 'sample', 'flash-sale', 'main.js');
    }
    const parent = dirname(dir);
    if (parent === dir)
      throw new Error('cannot find the repository root (package.json of nestjs-redis-lock)');
    dir = parent;
  }
}
