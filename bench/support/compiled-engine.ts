/**
 * Our engine as it ships: lib/engine compiled to JavaScript with the build's
 * compiler options, into bench/results/tmp/engine (git-ignored).
 *
 * Loading lib/engine/*.ts through tsx instead would put a handicap on our
 * side only: tsx compiles with esbuild's keepNames, which wraps every closure
 * the engine creates per lock cycle in a `__name()` call (about 1-2 µs of
 * CPU per cycle here), while the peers run their published JavaScript.
 */
import { execFile } from 'node:child_process';
import { once } from 'node:events';
import { mkdir, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { Worker } from 'node:worker_threads';

export type EngineModule = typeof import('../../lib/engine/index.js');

const here = dirname(fileURLToPath(import.meta.url));
const ROOT = join(here, '..', '..');
const TMP = join(here, '..', 'results', 'tmp');
const OUT = join(TMP, 'engine');

let loaded: Promise<{ engine: EngineModule; how: string }> | undefined;

/**
 * Transpiles every .ts file under lib/engine (sub-folders too) with tsconfig.build.json's options (as
 * ES modules, which the package is). Runs in a worker thread so that the
 * TypeScript compiler never sits in the heap that scenario 5 measures.
 */
const COMPILER = `
const { workerData } = require('node:worker_threads');
const fs = require('node:fs');
const path = require('node:path');
const ts = require(workerData.typescript);
const parsed = ts.getParsedCommandLineOfConfigFile(workerData.tsconfig, {}, {
  ...ts.sys,
  onUnRecoverableConfigFileDiagnostic: (d) => { throw new Error(ts.flattenDiagnosticMessageText(d.messageText, '\\n')); },
});
const compilerOptions = { ...parsed.options, module: ts.ModuleKind.ESNext, sourceMap: false, declaration: false, declarationMap: false, removeComments: true };
fs.rmSync(workerData.out, { recursive: true, force: true });
fs.mkdirSync(workerData.out, { recursive: true });
for (const file of fs.readdirSync(workerData.source, { recursive: true })) {
  if (!file.endsWith('.ts') || file.endsWith('.spec.ts')) continue;
  const { outputText } = ts.transpileModule(fs.readFileSync(path.join(workerData.source, file), 'utf8'), { compilerOptions, fileName: file });
  const target = path.join(workerData.out, file.replace(/\\.ts$/, '.js'));
  fs.mkdirSync(path.dirname(target), { recursive: true });
  fs.writeFileSync(target, outputText);
}
`;

async function compile(source: string, out: string): Promise<void> {
  const worker = new Worker(COMPILER, {
    eval: true,
    execArgv: [],
    workerData: {
      typescript: createRequire(import.meta.url).resolve('typescript'),
      tsconfig: join(ROOT, 'tsconfig.build.json'),
      source,
      out,
    },
  });
  // once() rejects if the worker emits 'error' (an exception in the compiler script).
  const [code] = (await once(worker, 'exit')) as [number];
  if (code !== 0) throw new Error(`the compiler worker exited with code ${code}`);
}

/** The compiled engine, built once per run; the TypeScript source through tsx if that fails. */
export function compiledEngine(): Promise<{ engine: EngineModule; how: string }> {
  loaded ??= (async () => {
    try {
      // A hand-off worker process: the bench compiled it before starting the worker.
      if (!process.env.BENCH_ENGINE_BUILT) await compile(join(ROOT, 'lib', 'engine'), OUT);
      const engine = (await import(pathToFileURL(join(OUT, 'index.js')).href)) as EngineModule;
      return {
        engine,
        how: 'lib/engine compiled to JavaScript (tsconfig.build.json options) at start-up',
      };
    } catch (error) {
      const engine = await import('../../lib/engine/index.js');
      return {
        engine,
        how: `lib/engine TypeScript through tsx (compiling it failed: ${(error as Error).message}); our figures carry tsx's per-closure overhead`,
      };
    }
  })();
  return loaded;
}

const run = promisify(execFile);

/** An earlier commit's engine, compiled as above, keyed by commit. */
const earlier = new Map<string, Promise<{ engine: EngineModule; commit: string }>>();

/**
 * The engine as it was at `ref` (a commit, tag or branch of this repository):
 * its lib/engine taken from git into bench/results/tmp/src-<commit>/ and
 * compiled the same way, for paired rounds against the working tree's. Throws
 * with what to change when `ref` names no commit or has no lib/engine.
 */
export function engineAt(ref: string): Promise<{ engine: EngineModule; commit: string }> {
  let loading = earlier.get(ref);
  if (!loading) {
    loading = (async () => {
      let commit: string;
      try {
        commit = (
          await run('git', ['rev-parse', '--short=10', '--verify', `${ref}^{commit}`], {
            cwd: ROOT,
          })
        ).stdout.trim();
      } catch {
        throw new Error(
          `--baseline '${ref}' names no commit of this repository; give a commit, tag or branch (see git log)`,
        );
      }
      const source = join(TMP, `src-${commit}`);
      await rm(source, { recursive: true, force: true });
      await mkdir(source, { recursive: true });
      const archive = `${source}.tar`;
      try {
        await run('git', ['archive', '--format=tar', '-o', archive, commit, 'lib/engine'], {
          cwd: ROOT,
        });
        await run('tar', ['-x', '-f', archive, '-C', source]);
      } catch (error) {
        throw new Error(
          `commit ${commit} has no lib/engine to compare with (${(error as Error).message.trim()})`,
        );
      }
      const out = join(TMP, `engine-${commit}`);
      await compile(join(source, 'lib', 'engine'), out);
      // Only the compiled engine is needed from here on.
      await Promise.all([
        rm(source, { recursive: true, force: true }),
        rm(archive, { force: true }),
      ]);
      const engine = (await import(pathToFileURL(join(out, 'index.js')).href)) as EngineModule;
      return { engine, commit };
    })();
    earlier.set(ref, loading);
  }
  return loading;
}
