import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { DEMO_DEFAULTS, runDemo, type DemoSummary } from '../../sample/flash-sale/demo/demo.js';
import { Output } from '../../sample/flash-sale/demo/output.js';
import { ProcessRegistry } from '../../sample/flash-sale/demo/processes.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/**
 * Compiles lib/ and the sample with tsc (esbuild would drop the decorator
 * metadata Nest injects by), without type-checking them again, into `dir`, beside a package.json named
 * nestjs-redis-lock, so the sample's `import ... from 'nestjs-redis-lock'`
 * resolves to the lib/ under test. dist/ and sample/dist/ are left alone.
 */
async function buildSample(dir: string): Promise<string> {
  const out = join(dir, 'build');
  await mkdir(out, { recursive: true });
  await writeFile(
    join(out, 'package.json'),
    JSON.stringify({
      name: 'nestjs-redis-lock',
      type: 'module',
      exports: { '.': './lib/index.js', './fenced': './lib/fenced/index.js' },
    }),
  );
  await symlink(join(ROOT, 'node_modules'), join(out, 'node_modules'), 'dir');
  const tsconfig = join(dir, 'tsconfig.json');
  await writeFile(
    tsconfig,
    JSON.stringify({
      extends: join(ROOT, 'tsconfig.json'),
      compilerOptions: {
        noEmit: false,
        declaration: false,
        sourceMap: false,
        rootDir: ROOT,
        outDir: out,
        typeRoots: [join(ROOT, 'node_modules/@types')],
        paths: {
          'nestjs-redis-lock': [join(ROOT, 'lib/index.ts')],
          'nestjs-redis-lock/fenced': [join(ROOT, 'lib/fenced/index.ts')],
        },
      },
      include: [],
      files: [join(ROOT, 'sample/flash-sale/main.ts')],
    }),
  );
  try {
    await promisify(execFile)(
      process.execPath,
      // Emit only: `npm run typecheck` checks the sample and lib/ already (half the CPU of tsc).
      [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', tsconfig, '--noCheck'],
      { cwd: ROOT },
    );
  } catch (error) {
    const { stdout, stderr } = error as { stdout?: string; stderr?: string };
    throw new Error(`tsc could not build the sample:\n${stdout ?? ''}${stderr ?? ''}`);
  }
  return join(out, 'sample/flash-sale/main.js');
}

describe('the flash-sale demo (npm run demo, smaller)', () => {
  const registry = new ProcessRegistry();
  const settings = { ...DEMO_DEFAULTS, requests: 600, concurrency: 150 };
  let workDir: string;
  let summary: DemoSummary;

  beforeAll(async () => {
    workDir = await mkdtemp(join(tmpdir(), 'flash-sale-spec-'));
    const appEntry = await buildSample(workDir);
    summary = await runDemo({ ...settings, appEntry, workDir, registry, out: Output.silent() });
  }, 90_000);

  afterAll(async () => {
    await registry.stopAll();
    if (workDir) await rm(workDir, { recursive: true, force: true });
  });

  it('oversells without a lock: five instances sell the same units', () => {
    const { unlocked } = summary.runs;
    if (unlocked.oversold === 0) {
      throw new Error(
        `The race was not provoked: without a lock ${unlocked.sold} of ${unlocked.stock} units were sold ` +
          `(${unlocked.requests} requests, ${settings.concurrency} in flight), so this run shows nothing about the lock.`,
      );
    }
    expect(unlocked.sold).toBeGreaterThan(unlocked.stock);
    expect(unlocked).toMatchObject({ errors: 0, errorSamples: [] });
  });

  it('never sells more than the stock with @Locked(): 0 oversold, every unit sold or in stock', () => {
    const { locked } = summary.runs;
    // The samples say what failed (a status and body, or a network error) when a request did.
    expect(locked).toMatchObject({ oversold: 0, errors: 0, errorSamples: [] });
    expect(locked.sold).toBeGreaterThan(0);
    expect(locked.sold + locked.stockLeft).toBe(settings.stock);
  });

  it('refuses the write of a zombie that read the stock before it froze, once the next holder has read: 0 lost updates', () => {
    const claimed = summary.zombies.find((z) => z.variant === 'claimed')!;
    expect(claimed.problem).toBeUndefined();
    // The next holder was granted the lock while the zombie was frozen: the zombie's lease had run out.
    expect(claimed.takeoverToken).toBeGreaterThan(claimed.zombieToken!);
    expect(claimed.pausedMs).toBeGreaterThan(0);
    // Both holders computed their write from the same read.
    expect(claimed.zombieRead).toBe(settings.stock);
    expect(claimed.takeoverRead).toBe(settings.stock);
    expect(claimed.zombieAnswer).toMatchObject({
      status: 409,
      code: 'STALE_TOKEN',
      token: claimed.zombieToken,
      lastToken: claimed.takeoverToken,
    });
    expect(claimed.takeoverAnswer).toMatchObject({ status: 201, token: claimed.takeoverToken });
    expect(claimed).toMatchObject({
      sold: 1,
      stockAfter: settings.stock - 1,
      lostUpdates: 0,
      refusedWrites: 1,
    });
  });

  it('loses that update when the stock is fenced at the write only, or not at all: the contrast, in the same run', () => {
    for (const variant of ['write-only', 'unfenced'] as const) {
      const z = summary.zombies.find((run) => run.variant === variant)!;
      expect({ variant, problem: z.problem }).toEqual({ variant, problem: undefined });
      expect(z.takeoverToken).toBeGreaterThan(z.zombieToken!);
      expect({
        variant,
        zombie: z.zombieAnswer?.status,
        takeover: z.takeoverAnswer?.status,
      }).toEqual({ variant, zombie: 201, takeover: 201 });
      // Two sales, one unit off the stock.
      expect({ variant, sold: z.sold, stockAfter: z.stockAfter, lost: z.lostUpdates }).toEqual({
        variant,
        sold: 2,
        stockAfter: settings.stock - 1,
        lost: 1,
      });
    }
  });

  it('reports success, which is what makes the demo exit 0', () => {
    expect(summary.checks.filter((check) => !check.ok)).toEqual([]);
    expect(summary.ok).toBe(true);
  });

  it('stops every process it started', async () => {
    const pids = registry.list().map((p) => p.pid!);
    expect(pids.length).toBeGreaterThan(0); // the Redis nodes and the last instances
    await registry.stopAll();
    expect(registry.size).toBe(0);
    for (const pid of pids) expect(() => process.kill(pid, 0)).toThrow(/ESRCH/);
  });
});
