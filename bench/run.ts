/**
 * The benchmark: our LockEngine and the peers side by side, in one process,
 * on the same local redis-server nodes, with raw ioredis floors measured in
 * the same run.
 *
 *   node --expose-gc --import tsx bench/run.ts [--quick] [--nodes 1,3,5] [--scenarios uncontended,handoff]
 *
 * Writes bench/results/latest.md, latest.svg and latest.json, and prints the
 * tables. A scenario is a module in bench/scenarios/ registered in SCENARIOS
 * below.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { cpus, loadavg, release, totalmem, type as osType } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  startRedisNodes,
  stopRedisNodes,
  type RedisNodeProcess,
} from '../dev/redis/redis-nodes.js';
import { engineWarnings, versionOf } from './contenders/index.js';
import { renderMarkdown, type RunSummary, type ScenarioRun } from './report/markdown-report.js';
import { renderSvg } from './report/svg-chart.js';
import { HEADLINES, renderTargets, type Headlines } from './report/targets.js';
import { baselineScenario } from './scenarios/baseline.scenario.js';
import { fencingScenario } from './scenarios/fencing.scenario.js';
import { handoffScenario } from './scenarios/handoff.scenario.js';
import { httpScenario } from './scenarios/http.scenario.js';
import { memoryScenario } from './scenarios/memory.scenario.js';
import { plainLoopScenario } from './scenarios/plain-loop.scenario.js';
import { sharedScenario } from './scenarios/shared.scenario.js';
import type { Scenario, ScenarioResult } from './scenarios/scenario.js';
import { uncontendedScenario } from './scenarios/uncontended.scenario.js';
import { parseBenchArgs, USAGE, type BenchArgs } from './support/bench-args.js';
import { BenchContext, FULL_TIMING, QUICK_TIMING } from './support/bench-context.js';
import { compiledEngine } from './support/compiled-engine.js';
import { CpuAccount, describeCpu } from './support/cpu-account.js';

/**
 * The scenarios, run in this order: the plain loop first, since its figures
 * are the headline. Scenario 3 reads the floors that scenario 1 measured in
 * the same run; each leaves its headline figures for the targets table at
 * the top of the report.
 */
const SCENARIOS: readonly Scenario[] = [
  plainLoopScenario, // 7
  uncontendedScenario, // 1
  handoffScenario, // 2
  fencingScenario, // 3
  httpScenario, // 4
  memoryScenario, // 5
  sharedScenario, // 6
];

const here = dirname(fileURLToPath(import.meta.url));

/** Scenario 8 runs only when asked for with --baseline: it compares us with ourselves. */
function select(
  requested: readonly string[] | undefined,
  baseline: string | undefined,
): Scenario[] {
  const known = [...SCENARIOS, baselineScenario];
  if (!requested) return baseline ? known : [...SCENARIOS];
  return requested.map((name) => {
    const found = known.find((s) => s.id === name || String(s.number) === name);
    if (!found) {
      throw new Error(
        `no scenario '${name}'; the scenarios are: ${known.map((s) => `${s.number} ${s.id}`).join(', ')}`,
      );
    }
    if (found === baselineScenario && !baseline) {
      throw new Error(
        'scenario 8 compares our engine with an earlier commit of it: add --baseline <commit>',
      );
    }
    return found;
  });
}

async function machineFacts(nodes: readonly RedisNodeProcess[]): Promise<[string, string][]> {
  const info = await nodes[0].cli('INFO', 'server');
  const redisVersion = /redis_version:(\S+)/.exec(info)?.[1] ?? '?';
  const cores = cpus();
  return [
    ['CPU', `${cores.length} × ${cores[0]?.model.trim() ?? '?'}`],
    ['memory', `${Math.round(totalmem() / 2 ** 30)} GiB`],
    ['OS', `${osType()} ${release()}`],
    [
      'load average at start',
      loadavg()
        .map((l) => l.toFixed(2))
        .join(' '),
    ],
    ['Node.js', `${process.version} (V8 ${process.versions.v8})`],
    ['redis-server', `${redisVersion}`],
    ['ioredis', versionOf('ioredis')],
    [
      'peers',
      ['redlock', '@sesamecare-oss/redlock', 'redlock-universal', 'redis-semaphore']
        .map((name) => `${name} ${versionOf(name)}`)
        .join(', '),
    ],
  ];
}

/** The project's Prettier style, so that `npm run format:check` passes on the committed results. */
async function prettify(text: string, parser: 'markdown' | 'json'): Promise<string> {
  try {
    const prettier = await import('prettier');
    const options = await prettier.resolveConfig(join(here, 'results', 'latest.md'));
    return await prettier.format(text, { ...options, parser });
  } catch {
    return text.endsWith('\n') ? text : `${text}\n`;
  }
}

async function main(): Promise<number> {
  const started = performance.now();
  let args: BenchArgs;
  let scenarios: Scenario[];
  try {
    args = parseBenchArgs(process.argv.slice(2), join(here, 'results'));
    scenarios = select(args.scenarios, args.baseline);
  } catch (error) {
    console.error((error as Error).message);
    return 2;
  }
  if (args.help) {
    console.log(USAGE);
    return 0;
  }
  const timing = args.quick ? QUICK_TIMING : FULL_TIMING;
  const maxNodes = Math.max(...scenarios.flatMap((s) => args.nodes ?? s.defaultNodes));

  const nodes = await startRedisNodes(maxNodes, { appendonly: false });
  const context = new BenchContext(nodes, timing, args.quick, args.nodes, args.baseline);
  let stopping = false;
  const cleanUp = async () => {
    await context.closeAll();
    await stopRedisNodes(nodes);
  };
  const onSignal = (signal: NodeJS.Signals) => {
    if (stopping) return;
    stopping = true;
    process.stderr.write(`\n${signal}: closing clients and stopping the redis nodes...\n`);
    cleanUp().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);

  const results: ScenarioRun[] = [];
  let machine: [string, string][] = [];
  const wholeRun = new CpuAccount(
    () => nodes.map((node) => node.pid),
    () => context.childTicks(),
  );
  let runCpu: ReturnType<CpuAccount['shares']>;
  try {
    machine = await machineFacts(nodes);
    context.log(machine.map(([k, v]) => `${k}: ${v}`).join('\n'));
    context.log(
      `${maxNodes} redis-server node(s) on loopback, appendonly no; ${args.quick ? 'quick' : 'full'} run\n`,
    );
    for (const scenario of scenarios) {
      context.log(`== ${scenario.number}. ${scenario.title}`);
      const cpu = new CpuAccount(
        () => nodes.map((node) => node.pid),
        () => context.childTicks(),
      );
      try {
        const result: ScenarioResult = await scenario.run(context);
        results.push({ scenario, result, cpu: cpu.shares() });
      } catch (error) {
        context.log(`  scenario failed: ${(error as Error).stack ?? error}`);
        results.push({ scenario, error: (error as Error).message, cpu: cpu.shares() });
      }
      const shares = results[results.length - 1].cpu;
      if (shares) context.log(`  ${describeCpu(shares)}`);
      if (stopping) return 130;
    }
    // Before the nodes stop: their CPU is read from /proc.
    runCpu = wholeRun.shares();
  } finally {
    if (!stopping) await cleanUp();
  }

  const seconds = (performance.now() - started) / 1000;
  machine.splice(
    machine.findIndex(([k]) => k === 'load average at start') + 1,
    0,
    [
      'load average at end',
      loadavg()
        .map((l) => l.toFixed(2))
        .join(' '),
    ],
    ...(runCpu
      ? [['CPU during the run', describeCpu(runCpu).replace(/^CPU /, '')] as [string, string]]
      : []),
  );
  const warnings = [...new Set(engineWarnings.map((w) => w.replace(/127\.0\.0\.1:\d+/g, 'NODE')))];
  const summary: RunSummary = {
    command: `node --expose-gc --import tsx bench/run.ts ${process.argv.slice(2).join(' ')}`.trim(),
    date: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
    mode: args.quick ? 'quick' : 'full',
    seconds,
    machine,
    setup: [
      `${maxNodes} independent \`redis-server\` processes on 127.0.0.1, started by the project's redis-server harness (dev/redis/redis-nodes.ts) with **appendonly no** and no RDB saves: the figures measure the lock protocols, not the disk. ` +
        'An n-node run uses the first n of them; every node is flushed (FLUSHALL) before each measurement.',
      `Our engine warns about that set-up on connect (expected here, swallowed by the bench): ${warnings.length > 0 ? warnings.map((w) => `“${w}”`).join(' ') : 'none'}`,
      `Our engine: ${(await compiledEngine()).how}, the way it ships (through tsx every closure it creates would be wrapped in esbuild's \`__name()\`, a cost the peers' published JavaScript does not pay).`,
      'Peers run in two configurations: **defaults**, as their READMEs set them up (plain `new Redis(url)` clients, the library’s default options: e.g. redlock’s retryDelay 200 ms with 10 retries, redlock-universal’s 3 retries and health-check PINGs, redis-semaphore’s auto-refresh timer), and **tuned +AP** (ioredis clients with `enableAutoPipelining: true`, unbounded 10 ms retries, extras off). Our engine runs with its defaults (it opens its own clients without auto-pipelining, since it batches its calls itself; the "ours, auto-pipelining clients" rows give it auto-pipelining ones).',
      'One Node.js process drives every library in turn (scenario 4: autocannon, against a Nest app in a separate Node.js process); each library gets its own fresh ioredis clients, closed after its run. ' +
        'The redis-servers share the same cores, so the figures are comparable with each other, not with a real network.',
      `Timing: the plain loop and uncontended run in ${timing.rounds} interleaved rounds of ${timing.warmupMs} ms warm-up + ${timing.measureMs} ms measured per library; ` +
        `hand-off ${timing.handoffWarmupMs} ms warm-up + ${timing.handoffMeasureMs} ms measured; HTTP ${timing.httpRounds} interleaved rounds of ${timing.httpMeasureMs} ms per endpoint after a ${timing.httpWarmupMs} ms warm-up; held locks ${timing.heldLocks.toLocaleString('en-US')}; growth ${timing.growthCycles.toLocaleString('en-US')} cycles. Lease (ttl) 10 s unless stated.`,
      'Each scenario ends with the CPU it saw: this process, the bench’s redis-servers, and other processes on the machine (anything above ~0.1 core there means the figures were taken on a shared, busy machine).',
      `GC: ${typeof (globalThis as { gc?: unknown }).gc === 'function' ? '--expose-gc' : 'switched on at run time (v8.setFlagsFromString)'}; a full GC before each measurement.`,
    ],
    scenarios: results,
    targets: renderTargets((context.shared.get(HEADLINES) ?? {}) as Headlines),
  };

  await mkdir(args.out, { recursive: true });
  const charts = results.flatMap((r) => r.result?.charts ?? []);
  const svgName = charts.length > 0 ? 'latest.svg' : undefined;
  const markdown = await prettify(renderMarkdown(summary, svgName), 'markdown');
  await writeFile(join(args.out, 'latest.md'), markdown);
  if (svgName) {
    const caption = `${machine[0]?.[1] ?? ''}, ${process.version}, redis ${machine.find(([k]) => k === 'redis-server')?.[1] ?? '?'}; ${summary.mode} run ${summary.date}`;
    await writeFile(join(args.out, svgName), renderSvg(charts, caption));
  }
  await writeFile(
    join(args.out, 'latest.json'),
    await prettify(
      JSON.stringify(
        {
          ...summary,
          scenarios: results.map(({ scenario, result, error, cpu }) => ({
            number: scenario.number,
            id: scenario.id,
            error,
            cpu,
            data: result?.data,
          })),
        },
        null,
        2,
      ),
      'json',
    ),
  );
  console.log(markdown);
  context.log(
    `Wrote ${relative(process.cwd(), join(args.out, 'latest.md'))}${svgName ? ', latest.svg' : ''} and latest.json in ${Math.round(seconds)} s.`,
  );
  return results.some((r) => r.error) ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    console.error(error instanceof Error ? (error.stack ?? error.message) : error);
    process.exit(1);
  },
);
