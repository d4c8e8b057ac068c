/**
 * Consumer apps for the package tests, installed the way a user installs them
 * (`npm install` from the registry, then `npm install` of the packed tarball),
 * with the registry part done once and kept:
 *
 * - {@link cachedInstall} installs an app's package.json into
 *   `node_modules/.cache/nestjs-redis-lock-package-apps/<name>-<hash>`, where
 *   the hash is that of the package.json: an unchanged package.json reuses the
 *   install, a changed one installs afresh (and the stale entry is removed).
 * - {@link appFromCache} makes a run's copy of such an install in a temporary
 *   folder, outside this repository (so nothing of the repository's own
 *   node_modules can stand in for a missing dependency), adds the app's sources
 *   and installs the freshly packed tarball into it.
 * - {@link compileApp} runs the app's tsc with its own tsconfig.json,
 *   incrementally: the build info and output of the last successful run are
 *   kept beside the cached install, so tsc checks again only what changed (the
 *   package's declarations, when the package changed).
 *
 * `rm -rf node_modules/.cache/nestjs-redis-lock-package-apps` clears it all.
 */
import { createHash, randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { copyFile, cp, mkdir, readdir, rename, rm, writeFile } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { limiter, mustRun, run, type RunResult } from './processes.js';

const ROOT = fileURLToPath(new URL('../../..', import.meta.url));
export const APP_CACHE = join(ROOT, 'node_modules/.cache/nestjs-redis-lock-package-apps');
/** Part of every hash: raise it when what a cache entry holds changes. */
const LAYOUT = 1;
export const NPM_FLAGS = ['--prefer-offline', '--no-audit', '--no-fund'];

/** npm installs: two at a time (a cold one mostly waits for the registry). */
const installing = limiter(2);
/**
 * tsc runs, which keep a core busy: one core is left to the rest of the test
 * run (Jest's other worker, whose specs measure time).
 */
const compiling = limiter(Math.max(1, availableParallelism() - 1));

const unique = (): string => `${process.pid}-${randomBytes(4).toString('hex')}`;

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
};

/** Other installs of `name` (a stale package.json's) and what killed runs left half done. */
async function pruneStale(name: string, keep: string): Promise<void> {
  const escaped = name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const entry = new RegExp(`^${escaped}-[0-9a-f]{16}(?:\\.tmp-(\\d+)-[0-9a-f]+)?$`);
  for (const found of await readdir(APP_CACHE)) {
    const match = entry.exec(found);
    if (!match || found === keep) continue;
    const pid = match[1];
    if (pid === undefined || !alive(Number(pid)))
      await rm(join(APP_CACHE, found), { recursive: true, force: true });
  }
}

/** Copies a folder, as hard links where the file system allows (the cache is only read). */
async function copyTree(from: string, to: string, timeoutMs: number): Promise<void> {
  const linked = await run('cp', ['-al', from, to], ROOT, timeoutMs);
  if (linked.code === 0) return;
  await rm(to, { recursive: true, force: true });
  await mustRun('cp', 'cp', ['-a', from, to], ROOT, timeoutMs);
}

/**
 * npm rewrites node_modules/.package-lock.json in place: the copy gets a file
 * of its own, so a hard-linked copy leaves the cached one as it was.
 */
async function unlinkHiddenLockfile(nodeModules: string): Promise<void> {
  const hidden = join(nodeModules, '.package-lock.json');
  if (!existsSync(hidden)) return;
  const own = `${hidden}.${unique()}`;
  await copyFile(hidden, own);
  await rename(own, hidden);
}

const installs = new Map<string, Promise<string>>();

/**
 * The folder of a cached `npm install` of `packageJson` (with its
 * package-lock.json and node_modules). With `base`, a cached install of the
 * same app whose package.json differs in a few versions, a missing install
 * starts from a copy of it and npm changes only what differs.
 */
export function cachedInstall(
  name: string,
  packageJson: object,
  timeoutMs: number,
  base?: Promise<string>,
): Promise<string> {
  const text = `${JSON.stringify(packageJson, null, 2)}\n`;
  const hash = createHash('sha256').update(`${LAYOUT}\n${text}`).digest('hex').slice(0, 16);
  const entry = `${name}-${hash}`;
  const dir = join(APP_CACHE, entry);
  let install = installs.get(dir);
  if (!install) {
    install = (async () => {
      if (existsSync(dir)) return dir;
      await mkdir(APP_CACHE, { recursive: true });
      const from = base && (await base);
      const partial = `${dir}.tmp-${unique()}`;
      try {
        await mkdir(partial);
        if (from) {
          await copyTree(join(from, 'node_modules'), join(partial, 'node_modules'), timeoutMs);
          await unlinkHiddenLockfile(join(partial, 'node_modules'));
          await copyFile(join(from, 'package-lock.json'), join(partial, 'package-lock.json'));
        }
        await writeFile(join(partial, 'package.json'), text);
        await installing(() =>
          mustRun(`npm install for ${name}`, 'npm', ['install', ...NPM_FLAGS], partial, timeoutMs),
        );
        // Another run may have finished the same install first: either is as good.
        await rename(partial, dir).catch((error: unknown) => {
          if (!existsSync(dir)) throw error;
        });
      } finally {
        await rm(partial, { recursive: true, force: true });
      }
      await pruneStale(name, entry);
      return dir;
    })();
    installs.set(dir, install);
  }
  return install;
}

export interface AppSources {
  /** Folders whose files are copied into the app in this order (package.json excepted). */
  dirs?: readonly string[];
  /** Files to write into the app: path -> content. */
  files?: Readonly<Record<string, string>>;
  /** tsc's outDir: the output (and build info) kept from the last successful compile. */
  outDir: string;
}

/**
 * `work`: a copy of the cached install `cache`, with `sources` added and the
 * tarball installed into it by npm.
 */
export async function appFromCache(
  cache: string,
  work: string,
  sources: AppSources,
  tarball: string,
  timeoutMs: number,
): Promise<void> {
  await mkdir(work, { recursive: true });
  await copyTree(join(cache, 'node_modules'), join(work, 'node_modules'), timeoutMs);
  await unlinkHiddenLockfile(join(work, 'node_modules'));
  for (const file of ['package.json', 'package-lock.json'])
    await copyFile(join(cache, file), join(work, file));
  const kept = join(cache, sources.outDir);
  if (existsSync(kept)) {
    // Replaced while copied by a concurrent run: then tsc compiles from scratch.
    await cp(kept, join(work, sources.outDir), { recursive: true }).catch(() =>
      rm(join(work, sources.outDir), { recursive: true, force: true }),
    );
  }
  for (const dir of sources.dirs ?? [])
    await cp(dir, work, { recursive: true, filter: (path) => path !== join(dir, 'package.json') });
  for (const [path, content] of Object.entries(sources.files ?? {}))
    await writeFile(join(work, path), content);
  await installing(() =>
    mustRun(
      'npm install of the packed tarball',
      'npm',
      ['install', '--no-save', ...NPM_FLAGS, tarball],
      work,
      timeoutMs,
    ),
  );
}

/**
 * `tsc -p tsconfig.json` in `work` (with `--incremental`, its build info in
 * the output folder). A clean compile's output is kept in the cache for the
 * next run.
 */
export async function compileApp(
  cache: string,
  work: string,
  tsc: string,
  outDir: string,
  timeoutMs: number,
): Promise<RunResult> {
  const args = [tsc, '-p', 'tsconfig.json', '--incremental'];
  args.push('--tsBuildInfoFile', join(outDir, '.tsbuildinfo'));
  const result = await compiling(() => run(process.execPath, args, work, timeoutMs));
  if (result.code === 0 && !result.stdout && !result.stderr) {
    const kept = join(cache, outDir);
    const next = `${kept}.tmp-${unique()}`;
    await cp(join(work, outDir), next, { recursive: true });
    await rm(kept, { recursive: true, force: true });
    await rename(next, kept).catch(() => rm(next, { recursive: true, force: true }));
  }
  return result;
}
