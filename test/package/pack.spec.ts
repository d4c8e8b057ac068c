/**
 * The package as users get it: `npm pack` (whose prepack script builds dist/)
 * in a copy of the repository, the tarball's contents, then real installs of
 * that tarball: a fresh Nest 12 app that type-checks against the published
 * declarations and runs with plain `node` against a real redis-server, and the
 * compatibility matrix of compat-matrix.ts (CommonJS and ESM apps, Nest 11 and
 * 12, ioredis 5 and 6). The apps' registry installs are cached
 * (support/app-installs.ts); the tarball is installed afresh on every run.
 *
 * The repository's own dist/ is never touched: the build runs in the copy.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { existsSync } from 'node:fs';
import {
  cp,
  lstat,
  mkdir,
  mkdtemp,
  readFile,
  readdir,
  rm,
  symlink,
  writeFile,
} from 'node:fs/promises';
import { builtinModules } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, posix, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { useRedisNodes } from '../support/use-redis-nodes.js';
import {
  INSTALL_TIMEOUT_MS,
  PREPARE_TIMEOUT_MS,
  TSC_TIMEOUT_MS,
  describeCompatMatrix,
  prepareMatrix,
  type PreparedApp,
} from './compat-matrix.js';
import { NPM_FLAGS, appFromCache, cachedInstall, compileApp } from './support/app-installs.js';
import { killAll, mustRun, type RunResult } from './support/processes.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const TSC = join(ROOT, 'node_modules/typescript/bin/tsc');

// --- Files --------------------------------------------------------------------

/** Every file under `dir`, as posix paths relative to it. */
async function listFiles(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true });
  return entries
    .filter((entry) => entry.isFile())
    .map((entry) => relative(dir, join(entry.parentPath, entry.name)).split(sep).join('/'))
    .sort();
}

/** What a checkout holds that `npm pack` in a clean clone would not see. */
function isBuildOrLocalState(path: string): boolean {
  const parts = relative(ROOT, path).split(sep);
  return (
    parts.some((part) => part === 'node_modules' || part === 'dist' || part === '.git') ||
    parts[0] === 'coverage' ||
    parts.join('/').startsWith('bench/results/tmp') ||
    path.endsWith('.tgz') ||
    path.endsWith('.tsbuildinfo')
  );
}

/** The package a bare import specifier names: `@scope/name/sub.js` -> `@scope/name`. */
function packageOf(specifier: string): string {
  const parts = specifier.split('/');
  return specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0]!;
}

const BUILTINS = new Set(builtinModules);
const isBuiltin = (specifier: string): boolean =>
  specifier.startsWith('node:') || BUILTINS.has(packageOf(specifier));

interface Imports {
  /** Loaded with the module: `from '...'`, `import '...'`. */
  static: Set<string>;
  /** Loaded when the code runs: `import('...')`. */
  dynamic: Set<string>;
  /** Named by the declarations (`.d.ts`), which a consumer's compiler must resolve. */
  types: Set<string>;
}

/** Module specifiers a compiled file imports. */
function importsOf(path: string, source: string, into: Imports): void {
  const dynamic = [...source.matchAll(/\bimport\s*\(\s*['"]([^'"]+)['"]\s*\)/g)];
  const fixed = [...source.matchAll(/(?:\bfrom\s*|^\s*import\s*)['"]([^'"]+)['"]/gm)];
  if (path.endsWith('.d.ts')) {
    for (const match of [...dynamic, ...fixed]) into.types.add(match[1]!);
  } else {
    for (const match of dynamic) into.dynamic.add(match[1]!);
    for (const match of fixed) into.static.add(match[1]!);
  }
}

interface PackageJson {
  name: string;
  version: string;
  main?: string;
  types?: string;
  exports?: Record<string, string | Record<string, string>>;
  bin?: Record<string, string>;
  dependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  peerDependenciesMeta?: Record<string, { optional?: boolean }>;
}

async function readJson<T>(path: string): Promise<T> {
  return JSON.parse(await readFile(path, 'utf8')) as T;
}

// --- The consumer app ---------------------------------------------------------

/** The versions this repository runs its tests with, so npm finds them in its cache. */
async function installedVersion(name: string): Promise<string> {
  return (await readJson<PackageJson>(join(ROOT, 'node_modules', name, 'package.json'))).version;
}

/**
 * The fresh app: its dependencies installed once (support/app-installs.ts),
 * the tarball installed on top, then compiled by this repository's tsc.
 */
async function prepareFreshApp(work: string, tarball: string): Promise<PreparedApp> {
  const dependencies: Record<string, string> = {};
  for (const name of [
    '@nestjs/common',
    '@nestjs/core',
    '@nestjs/platform-express',
    // The optional peers of nestjs-redis-lock/health and /telemetry, so every entry point loads.
    '@nestjs/terminus',
    '@opentelemetry/api',
    'ioredis',
    'reflect-metadata',
    'rxjs',
  ])
    dependencies[name] = await installedVersion(name);
  const packageJson = {
    name: 'fresh-nest-app',
    private: true,
    type: 'module',
    dependencies,
    devDependencies: { '@types/node': await installedVersion('@types/node') },
  };
  const cache = await cachedInstall('fresh-nest-app', packageJson, INSTALL_TIMEOUT_MS);
  const dir = join(work, 'app');
  const files = {
    'tsconfig.json': JSON.stringify(CONSUMER_TSCONFIG, null, 2),
    'main.ts': CONSUMER_MAIN,
  };
  await appFromCache(cache, dir, { files, outDir: 'out' }, tarball, INSTALL_TIMEOUT_MS);
  return { dir, typecheck: await compileApp(cache, dir, TSC, 'out', TSC_TIMEOUT_MS) };
}

const CONSUMER_TSCONFIG = {
  compilerOptions: {
    target: 'ES2022',
    module: 'NodeNext',
    moduleResolution: 'NodeNext',
    strict: true,
    experimentalDecorators: true,
    emitDecoratorMetadata: true,
    // Checked, so errors in the published .d.ts files fail the test.
    skipLibCheck: false,
    types: ['node'],
    rootDir: '.',
    outDir: 'out',
  },
  files: ['main.ts'],
};

/**
 * What a user writes: decorators compiled by tsc (Nest injects by their
 * metadata), the package imported by name, run with plain `node`. Prints one
 * JSON line.
 */
const CONSUMER_MAIN = `import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import {
  FencingToken,
  LockBusyError,
  LockService,
  Locked,
  RedisLockModule,
  type Lock,
  type RedisLockModuleOptions,
} from 'nestjs-redis-lock';
import { LockEngine } from 'nestjs-redis-lock/engine';
// The other entry points' declarations are checked too (skipLibCheck off), not only those used.
import type * as Testing from 'nestjs-redis-lock/testing';
import type * as Health from 'nestjs-redis-lock/health';
import type * as Telemetry from 'nestjs-redis-lock/telemetry';
export type EntryPoints = [typeof Testing, typeof Health, typeof Telemetry];

@Injectable()
class Orders {
  @Locked('order:<0>')
  async pay(id: number, @FencingToken() token?: number): Promise<{ id: number; token?: number }> {
    return { id, token };
  }

  @Locked('order:<0>', { wait: false })
  async payNow(id: number): Promise<number> {
    return id;
  }
}

const options: RedisLockModuleOptions = { nodes: [process.argv[2]!] };

@Module({ imports: [RedisLockModule.forRoot(options)], providers: [Orders] })
class AppModule {}

// The published types are checked, not any: nodes is an array.
// @ts-expect-error
RedisLockModule.forRoot({ nodes: 'redis://127.0.0.1:6379' });

const errorName = (error: unknown): string =>
  error instanceof LockBusyError ? 'LockBusyError' : String(error);

const app = await NestFactory.createApplicationContext(AppModule, { logger: false });
try {
  const locks = app.get(LockService);
  const orders = app.get(Orders);

  const first: Lock = await locks.acquire('manual');
  const whileHeld = await locks.tryAcquire('manual').then(() => 'acquired', errorName);
  const release = await first.release();
  const second = await locks.acquire('manual');
  await second.release();

  const paid = await orders.pay(42);
  const paidAgain = await orders.pay(42);

  const holding = await locks.acquire('order:7');
  const payNowWhileHeld = await orders.payNow(7).then(() => 'ran', errorName);
  await holding.release();
  const payNowAfter = await orders.payNow(7);

  const deepImport = await import('nestjs-redis-lock/dist/index.js' as string).then(
    () => 'imported',
    (error: NodeJS.ErrnoException) => error.code,
  );

  console.log(
    JSON.stringify({
      tokens: [first.token, second.token],
      whileHeld,
      released: release.released,
      paid,
      paidAgain,
      payNowWhileHeld,
      payNowAfter,
      serviceIsEngine: locks instanceof LockEngine,
      deepImport,
    }),
  );
} finally {
  await app.close();
}
`;

/**
 * A CommonJS consumer in plain JavaScript: `require()`s each entry point named
 * on the command line, then `import()`s it, and prints per entry point the
 * names each way gave and whether both gave the very same objects (one module
 * instance, so classes used as DI tokens and in instanceof checks match).
 */
const REQUIRE_ALL = `'use strict';
const entries = JSON.parse(process.argv[2]);
(async () => {
  const out = {};
  for (const entry of entries) {
    const required = require(entry);
    const imported = await import(entry);
    const names = (m) => Object.keys(m).filter((n) => n !== 'default' && m[n] !== undefined).sort();
    out[entry] = {
      required: names(required),
      imported: names(imported),
      same: names(imported).every((n) => required[n] === imported[n]),
    };
  }
  process.stdout.write(JSON.stringify(out));
})();
`;

// --- The specification --------------------------------------------------------

describe('the npm package: packed, then installed in a fresh Nest 12 app', () => {
  const redis = useRedisNodes(1);
  let work: string | undefined;
  let packageDir: string;
  let tarball: string;
  let packed: { size: number; unpackedSize: number; filename: string };
  let files: string[];
  let extracted: string;
  let manifest: PackageJson;
  let freshApp: Promise<PreparedApp>;
  let matrix: Map<string, Promise<PreparedApp>>;

  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'redis-lock-pack-'));
    packageDir = join(work, 'repo');
    await cp(ROOT, packageDir, {
      recursive: true,
      filter: (source) => !isBuildOrLocalState(source),
    });
    await symlink(join(ROOT, 'node_modules'), join(packageDir, 'node_modules'), 'dir');

    const { stdout } = await mustRun(
      'npm pack',
      'npm',
      ['pack', '--json', '--pack-destination', work, ...NPM_FLAGS],
      packageDir,
      150_000,
    );
    [packed] = JSON.parse(stdout) as [typeof packed];
    tarball = join(work, packed.filename);

    // The apps install (or take from the cache) while the tests below run; each awaits its own.
    freshApp = prepareFreshApp(work, tarball);
    freshApp.catch(() => undefined); // reported by the fresh app's beforeAll
    matrix = prepareMatrix(work, tarball);

    extracted = join(work, 'extracted');
    await mkdir(extracted);
    await mustRun('tar', 'tar', ['-xzf', tarball, '-C', extracted], work, 10_000);
    extracted = join(extracted, 'package');
    files = await listFiles(extracted);
    manifest = await readJson<PackageJson>(join(extracted, 'package.json'));
  }, 180_000);

  afterAll(async () => {
    killAll();
    if (work) await rm(work, { recursive: true, force: true });
  });

  it('builds on pack (prepack) and ships the JS and type declarations of every module in lib/', async () => {
    const modules = (await listFiles(join(packageDir, 'lib')))
      .filter((path) => path.endsWith('.ts') && !path.endsWith('.d.ts'))
      .filter((path) => !path.endsWith('.spec.ts'))
      .map((path) => path.replace(/\.ts$/, ''));
    expect(modules).toContain('index');
    const expected = modules.flatMap((path) => [`dist/${path}.js`, `dist/${path}.d.ts`]);
    expect(expected.filter((path) => !files.includes(path))).toEqual([]);
    expect(files).toEqual(
      expect.arrayContaining(['dist/index.js', 'dist/index.d.ts', 'dist/engine/index.js']),
    );
  });

  it('ships only dist/, docs/, package.json, README.md and LICENSE: no sources, tests, sample or benchmarks', () => {
    // npm leaves out a file named in "files" that does not exist without a word.
    const topLevel = ['LICENSE', 'README.md', 'package.json', 'docs/fencing.md'];
    expect(files).toEqual(expect.arrayContaining(topLevel));
    const stray = files.filter(
      (path) =>
        !topLevel.includes(path) &&
        !/^dist\/.+\.(js|d\.ts)(\.map)?$/.test(path) &&
        !/^docs\/[\w-]+\.md$/.test(path),
    );
    expect(stray).toEqual([]);
  });

  it('links from its README and docs only to files it ships, or to full URLs', async () => {
    const dead: string[] = [];
    for (const path of files.filter((file) => file.endsWith('.md'))) {
      const text = await readFile(join(extracted, path), 'utf8');
      for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
        if (/^(https?:|mailto:|#)/.test(target)) continue;
        const file = posix.normalize(posix.join(posix.dirname(path), target.split('#')[0]));
        if (!files.includes(file)) dead.push(`${path}: ${target}`);
      }
    }
    expect(dead).toEqual([]);
  });

  it('ships no source map that points at sources left out of the package', async () => {
    const dangling: string[] = [];
    for (const path of files.filter((file) => /\.(js|d\.ts)$/.test(file))) {
      const source = await readFile(join(extracted, path), 'utf8');
      const url = /\/\/# sourceMappingURL=(\S+)\s*$/.exec(source)?.[1];
      if (url && !url.startsWith('data:')) {
        const map = posix.join(posix.dirname(path), url);
        if (!files.includes(map)) dangling.push(`${path} -> ${map}`);
      }
    }
    for (const path of files.filter((file) => file.endsWith('.map'))) {
      const map = await readJson<{
        sourceRoot?: string;
        sources: string[];
        sourcesContent?: (string | null)[];
      }>(join(extracted, path));
      map.sources.forEach((source, index) => {
        if (map.sourcesContent?.[index] != null) return;
        const target = posix.join(posix.dirname(path), map.sourceRoot ?? '', source);
        if (!files.includes(target)) dangling.push(`${path} -> ${target}`);
      });
    }
    expect(dangling).toEqual([]);
  });

  it('is a small tarball', () => {
    // The package, its CLI, health, telemetry, fenced-write and testing entry points (with
    // in-memory read-write locks and semaphores), read-write locks, semaphores, leaders and a
    // long README and the docs (about 1 MB unpacked: 520 kB of JS with its comments, 250 the
    // typings with their JSDoc, 220 the docs): a guard against shipping something by mistake
    // (sources, tests, maps: each would add hundreds of kB), not a tight budget.
    expect(packed.size).toBeLessThan(330_000);
    expect(packed.unpackedSize).toBeLessThan(1_100_000);
  });

  it('ships every entry point that package.json names, and the command-line tool', () => {
    const targets = [
      manifest.main,
      manifest.types,
      ...Object.values(manifest.exports ?? {}).flatMap((target) =>
        typeof target === 'string' ? [target] : Object.values(target),
      ),
      ...Object.values(manifest.bin ?? {}),
    ].map((target) => posix.normalize(target ?? '(missing)'));
    expect(Object.keys(manifest.exports ?? {}).sort()).toEqual([
      '.',
      './engine',
      './fenced',
      './health',
      './package.json',
      './telemetry',
      './testing',
    ]);
    expect(targets.filter((target) => !files.includes(target))).toEqual([]);
    expect(manifest.bin).toEqual({ 'nestjs-redis-lock': 'dist/cli/main.js' });
  });

  it('accepts Nest 11 and 12 and ioredis 5 and 6 as peers, and needs no dependencies of its own', () => {
    const majors = (range: string | undefined): string[] =>
      (range ?? '').split('||').map((part) => /^\s*\^(\d+)\./.exec(part)?.[1] ?? part.trim());
    const peers = manifest.peerDependencies ?? {};
    for (const nest of ['@nestjs/common', '@nestjs/core'])
      expect(majors(peers[nest])).toEqual(expect.arrayContaining(['11', '12']));
    expect(majors(peers.ioredis)).toEqual(expect.arrayContaining(['5', '6']));
    expect(peers).toHaveProperty('reflect-metadata');
    expect(peers).toHaveProperty('rxjs');
    expect(manifest.dependencies ?? {}).toEqual({});
  });

  it('imports only Node built-ins and peers, and loads the optional peers on demand or from their own entry point only', async () => {
    const imports: Imports = { static: new Set(), dynamic: new Set(), types: new Set() };
    // nestjs-redis-lock/health and /telemetry exist to load their optional peer; nothing else may.
    const optIn: Record<string, Imports> = {
      '@nestjs/terminus': { static: new Set(), dynamic: new Set(), types: new Set() },
      '@opentelemetry/api': { static: new Set(), dynamic: new Set(), types: new Set() },
    };
    // nestjs-redis-lock/fenced works on the clients the app passes in: its drivers and ORMs are
    // named by its type declarations only, but Kysely's, loaded when its adapter first runs.
    const fenced: Imports = { static: new Set(), dynamic: new Set(), types: new Set() };
    const entryOf = (path: string): Imports =>
      path.startsWith('dist/fenced/')
        ? fenced
        : path.startsWith('dist/health/')
          ? optIn['@nestjs/terminus']!
          : path.startsWith('dist/telemetry/')
            ? optIn['@opentelemetry/api']!
            : imports;
    for (const path of files.filter((file) => /\.(js|d\.ts)$/.test(file)))
      importsOf(path, await readFile(join(extracted, path), 'utf8'), entryOf(path));
    const bare = (specifiers: Set<string>): string[] =>
      [...specifiers].filter((s) => !s.startsWith('.') && !isBuiltin(s)).map(packageOf);
    const peers = manifest.peerDependencies ?? {};
    const optional = Object.keys(peers).filter(
      (name) => manifest.peerDependenciesMeta?.[name]?.optional,
    );

    const undeclared = [imports, fenced, ...Object.values(optIn)]
      .flatMap((found) => [...bare(found.static), ...bare(found.dynamic), ...bare(found.types)])
      .filter((name) => !(name in peers));
    expect([...new Set(undeclared)]).toEqual([]);
    expect(bare(imports.static).filter((name) => optional.includes(name))).toEqual([]);
    expect(optional.sort()).toEqual([
      '@nestjs/graphql',
      '@nestjs/microservices',
      '@nestjs/schedule',
      '@nestjs/terminus',
      '@nestjs/websockets',
      '@opentelemetry/api',
      'better-sqlite3',
      'graphql',
      'kysely',
      'pg',
      'typeorm',
    ]);
    expect(bare(fenced.static)).toEqual([]);
    expect(bare(fenced.dynamic)).toEqual(['kysely']);
    expect([...new Set(bare(imports.dynamic))].sort()).toEqual([
      '@nestjs/microservices',
      '@nestjs/websockets',
      // Loaded on the first lock failure in a GraphQL resolver, never by other apps.
      'graphql',
    ]);
    for (const [peer, found] of Object.entries(optIn)) {
      expect(bare(found.static).filter((name) => optional.includes(name))).toEqual([peer]);
      expect(bare(found.dynamic)).toEqual([]);
    }
  });

  describe('installed from the tarball', () => {
    let app: string;
    let typecheck: RunResult;

    beforeAll(async () => {
      ({ dir: app, typecheck } = await freshApp);
    }, PREPARE_TIMEOUT_MS);

    it('is a real install of the packed files, without the optional transport peers', async () => {
      const installed = join(app, 'node_modules/nestjs-redis-lock');
      expect((await lstat(installed)).isSymbolicLink()).toBe(false);
      expect(await listFiles(installed)).toEqual(files);
      expect(existsSync(join(app, 'node_modules/@nestjs/microservices'))).toBe(false);
      expect(existsSync(join(app, 'node_modules/@nestjs/websockets'))).toBe(false);
    });

    it('type-checks a TypeScript consumer against the published declarations (NodeNext)', () => {
      expect(typecheck.stdout + typecheck.stderr).toBe('');
      expect(typecheck.code).toBe(0);
    });

    it('boots RedisLockModule.forRoot with plain node, locks through LockService and @Locked(), and exits', async () => {
      const main = join(app, 'out/main.js');
      expect(existsSync(main)).toBe(true);
      const result = await mustRun(
        'the consumer app',
        process.execPath,
        [main, redis.nodes[0]!.url],
        dirname(main),
        20_000,
      );
      const output = JSON.parse(result.stdout.trim().split('\n').at(-1)!) as Record<
        string,
        unknown
      >;
      const tokens = output.tokens as number[];
      expect(tokens[0]).toBeGreaterThan(0);
      expect(tokens[1]).toBeGreaterThan(tokens[0]!);
      const paid = output.paid as { token: number };
      const paidAgain = output.paidAgain as { token: number };
      expect(output).toMatchObject({
        whileHeld: 'LockBusyError',
        released: true,
        paid: { id: 42, token: expect.any(Number) },
        paidAgain: { id: 42 },
        payNowWhileHeld: 'LockBusyError',
        payNowAfter: 7,
        serviceIsEngine: true,
        deepImport: 'ERR_PACKAGE_PATH_NOT_EXPORTED',
      });
      expect(paidAgain.token).toBeGreaterThan(paid.token);
    });

    it('loads every entry point with require() from CommonJS, as the same modules an import gets', async () => {
      // Every entry point but ./package.json, which import() would want as JSON (with a type attribute).
      const entries = Object.keys(manifest.exports ?? {})
        .filter((subpath) => subpath !== './package.json')
        .map((subpath) => posix.join(manifest.name, subpath));
      expect(entries.length).toBeGreaterThanOrEqual(4);
      await writeFile(join(app, 'require-all.cjs'), REQUIRE_ALL);
      const result = await mustRun(
        'the CommonJS consumer',
        process.execPath,
        ['require-all.cjs', JSON.stringify(entries)],
        app,
        20_000,
      );
      const loaded = JSON.parse(result.stdout) as Record<
        string,
        { required: string[]; imported: string[]; same: boolean }
      >;
      expect(Object.keys(loaded).sort()).toEqual([...entries].sort());
      for (const entry of entries) {
        const { required, imported, same } = loaded[entry]!;
        expect({ entry, required }).toEqual({ entry, required: imported });
        expect({ entry, same }).toEqual({ entry, same: true });
      }
      // The root entry point: every export a CommonJS app gets is a real one, not undefined.
      expect(loaded['nestjs-redis-lock']!.required).toEqual(
        expect.arrayContaining(['LockService', 'Locked', 'RedisLockModule', 'LockBusyError']),
      );
      // No experimental warning for require() of an ES module installed under node_modules.
      expect(result.stderr).toBe('');
    });

    it('installs the nestjs-redis-lock command, which runs with plain node against a real node', async () => {
      const bin = join(app, 'node_modules/.bin/nestjs-redis-lock');
      const version = await mustRun('the installed CLI', bin, ['--version'], app, 10_000);
      expect(version.stdout).toBe(`${manifest.version}\n`);
      const health = await mustRun(
        'the installed CLI',
        bin,
        ['health', '--json', '--nodes', redis.nodes[0]!.url],
        app,
        10_000,
      );
      expect(JSON.parse(health.stdout)).toMatchObject({ quorum: true, up: 1 });
    });
  });

  describe('the compatibility matrix: CommonJS and ESM apps, Nest 11 and 12, ioredis 5 and 6', () => {
    describeCompatMatrix(() => ({
      prepared: matrix,
      version: manifest.version,
      redisUrl: redis.nodes[0]!.url,
    }));
  });
});
