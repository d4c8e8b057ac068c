/**
 * TypeScript scripts run as child processes by the tests: each is bundled
 * once by esbuild into a single ES module (npm packages stay imports) and run
 * with plain `node`. Loading one file costs a child about a third of the CPU
 * that loading every module through tsx's loader hooks does (0.1 s against
 * 0.4 s for the engine and its imports, measured on a 2-core machine), and
 * the suites start a few dozen such children.
 *
 * The bundles sit in `node_modules/.cache/nestjs-redis-lock-scripts/`, named
 * by the hash of their contents, so that the packages they import resolve
 * from the repository's node_modules as they do from the sources, and an
 * edited script makes a new bundle. Bundling is esbuild's, as tsx's
 * transform is: no decorator metadata, so the Nest apps among the scripts
 * inject by `@Inject()` tokens. A script that reads files relative to its own
 * `import.meta.url` (the CLI reads package.json that way) is not for this.
 *
 * ```ts
 * const child = spawnScript('test/support/contender.ts', { args: ['--nodes', urls] });
 * ```
 */
import { buildSync } from 'esbuild';
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { basename, extname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { withParentDeathSignal } from './processes.js';

/** The repository root: scripts run from there. */
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const BUNDLES = join(ROOT, 'node_modules/.cache/nestjs-redis-lock-scripts');

/** This module instance's bundles, by the script's absolute path. */
const bundles = new Map<string, string>();

/**
 * The path of `script` (a TypeScript entry point, relative to the repository
 * root or absolute) bundled into one ES module, made on first use.
 */
export function bundleScript(script: string): string {
  const entry = resolve(ROOT, script);
  const known = bundles.get(entry);
  if (known) return known;
  const { outputFiles } = buildSync({
    entryPoints: [entry],
    bundle: true,
    packages: 'external',
    platform: 'node',
    format: 'esm',
    target: 'node20',
    tsconfig: join(ROOT, 'tsconfig.json'),
    absWorkingDir: ROOT,
    write: false,
    logLevel: 'silent',
  });
  const code = outputFiles[0]!.contents;
  const hash = createHash('sha256').update(code).digest('hex').slice(0, 16);
  const path = join(BUNDLES, `${basename(entry, extname(entry))}-${hash}.mjs`);
  if (!existsSync(path)) {
    mkdirSync(BUNDLES, { recursive: true });
    // Written aside and renamed: a Jest worker beside this one may be making the same file.
    const partial = `${path}.${process.pid}.tmp`;
    writeFileSync(partial, code);
    renameSync(partial, path);
  }
  bundles.set(entry, path);
  return path;
}

export interface ScriptProcessOptions {
  /** The script's arguments. */
  readonly args?: readonly string[];
  /** Set in the child's environment, over this process's. */
  readonly env?: NodeJS.ProcessEnv;
  /** Default: 'pipe'. stdout and stderr are always piped. */
  readonly stdin?: 'pipe' | 'ignore';
  /** Through {@link withParentDeathSignal}. Default: false. */
  readonly dieWithParent?: boolean;
}

/**
 * Runs a TypeScript script ({@link bundleScript}) as a plain Node process
 * from the repository root: this process's environment without NODE_OPTIONS,
 * which under Jest holds --experimental-vm-modules.
 */
export function spawnScript(script: string, options: ScriptProcessOptions = {}): ChildProcess {
  const { NODE_OPTIONS: _jest, ...env } = process.env;
  const argv = [process.execPath, bundleScript(script), ...(options.args ?? [])];
  const [command, ...args] = options.dieWithParent ? withParentDeathSignal(argv) : argv;
  return spawn(command!, args, {
    cwd: ROOT,
    env: { ...env, ...options.env },
    stdio: [options.stdin ?? 'pipe', 'pipe', 'pipe'],
  });
}
