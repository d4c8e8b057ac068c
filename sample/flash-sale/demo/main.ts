/**
 * `npm run demo`: the flash sale without and with the lock, then the zombie.
 * Exits 0 only when the locked run oversold nothing and the zombie's late
 * write was refused. Every process it starts is stopped at the end, on
 * failure and on Ctrl-C.
 */
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { DEMO_DEFAULTS, runDemo, type DemoSummary } from './demo.js';
import { ms, Output } from './output.js';
import { ProcessRegistry } from './processes.js';

const USAGE = `Usage: npm run demo -- [options]

  --json               print the summary as JSON on stdout (the story goes to stderr)
  --requests <n>       purchase requests per run (default ${DEMO_DEFAULTS.requests})
  --concurrency <n>    requests in flight at once (default ${DEMO_DEFAULTS.concurrency})
  --instances <n>      app instances (default ${DEMO_DEFAULTS.instances})
  --keep               keep the work directory (database, logs) after a successful run
  -h, --help           show this help

Needs redis-server on the PATH (or REDIS_SERVER_BIN).`;

const { values } = parseArgs({
  options: {
    json: { type: 'boolean', default: false },
    requests: { type: 'string' },
    concurrency: { type: 'string' },
    instances: { type: 'string' },
    keep: { type: 'boolean', default: false },
    help: { type: 'boolean', short: 'h', default: false },
  },
});

if (values.help) {
  console.log(USAGE);
  process.exit(0);
}

function positive(name: string, value: string | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  const number = Number(value);
  if (!Number.isInteger(number) || number < 1) {
    console.error(`--${name} must be a whole number from 1 (got '${value}').\n\n${USAGE}`);
    process.exit(2);
  }
  return number;
}

const settings = {
  ...DEMO_DEFAULTS,
  requests: positive('requests', values.requests, DEMO_DEFAULTS.requests),
  concurrency: positive('concurrency', values.concurrency, DEMO_DEFAULTS.concurrency),
  instances: Math.max(2, positive('instances', values.instances, DEMO_DEFAULTS.instances)),
};
const out = new Output(values.json ? process.stderr : process.stdout);
const registry = new ProcessRegistry();
const workDir = await mkdtemp(join(tmpdir(), 'flash-sale-demo-'));
const started = performance.now();

// Ctrl-C (or SIGTERM) stops every process first; a second one does not wait.
let interrupted = false;
const onSignal = (signal: NodeJS.Signals) => {
  const code = signal === 'SIGINT' ? 130 : 143;
  if (interrupted) {
    registry.killAllNow();
    process.exit(code);
  }
  interrupted = true;
  out.line();
  out.line(`${signal}: stopping the ${registry.size} processes the demo started…`);
  out.mute();
  void registry
    .stopAll()
    .then(() => rm(workDir, { recursive: true, force: true }))
    .finally(() => process.exit(code));
};
process.on('SIGINT', onSignal);
process.on('SIGTERM', onSignal);
// The last resort, should anything above throw: no child outlives the demo.
process.on('exit', () => registry.killAllNow());

let summary: DemoSummary | undefined;
let failure: Error | undefined;
try {
  summary = await runDemo({ ...settings, workDir, registry, out });
} catch (error) {
  failure = error as Error;
} finally {
  await registry.stopAll();
}

if (!interrupted) {
  const ok = summary?.ok === true;
  const elapsed = ms(performance.now() - started);
  out.line();
  if (failure) out.line(out.fail(`The demo failed: ${failure.message}`));
  const empty = (await readdir(workDir)).length === 0;
  if ((ok && !values.keep) || empty) {
    await rm(workDir, { recursive: true, force: true });
    out.line(out.dim(`Done in ${elapsed}; every process the demo started has stopped.`));
  } else {
    out.line(
      out.dim(`Done in ${elapsed}; every process stopped. Database and logs kept in ${workDir}`),
    );
  }
  if (values.json) {
    const report = summary ?? { ok: false, error: failure?.message ?? 'unknown failure' };
    process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
  }
  process.exitCode = ok ? 0 : 1;
}
