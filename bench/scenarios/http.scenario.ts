import autocannon from 'autocannon';
import { HEADLINES, type Headlines } from '../report/targets.js';
import type { BenchContext } from '../support/bench-context.js';
import { processTicks, TICKS_PER_SECOND } from '../support/cpu-account.js';
import { formatMs } from '../../dev/text.js';
import { formatRate, formatRatio, pairedRatio } from '../support/format.js';
import { startHttpApp, type HttpApp, type HttpPlatform } from '../support/http-app.js';
import { LatencyRecorder, type LatencySummary } from '../support/latency.js';
import type { ChartPanel, ReportTable, Scenario, ScenarioResult } from './scenario.js';

/** Concurrent keep-alive connections of the load generator, like the 32 callers of scenario 1. */
const CONNECTIONS = 32;
const PLATFORMS: readonly HttpPlatform[] = ['express', 'fastify'];

/** The app processes of one platform and node count. */
type AppKind = 'lock' | 'lockApClients' | 'optOut' | 'bare';

type Endpoint =
  | 'plain'
  | 'locked'
  | 'byHand'
  | 'writePlain'
  | 'writeLocked'
  | 'writeFloor'
  | 'lockedApClients'
  | 'hot'
  | 'plainOptOut'
  | 'lockedOptOut'
  | 'bare';

/** A fresh id on every request: `/<route>/<run>-<i>`. */
const freshId =
  (route: string) =>
  (run: string, i: number): string =>
    `/${route}/${run}-${i}`;

const ENDPOINTS: Record<
  Endpoint,
  { label: string; app: AppKind; path: (run: string, i: number) => string }
> = {
  plain: { label: 'GET /plain/:id', app: 'lock', path: freshId('plain') },
  locked: { label: 'GET /locked/:id (@Locked)', app: 'lock', path: freshId('locked') },
  byHand: {
    label: 'GET /by-hand/:id (LockService.using() in the handler)',
    app: 'lock',
    path: freshId('by-hand'),
  },
  writePlain: {
    label: 'GET /write/plain/:id (SQLite write)',
    app: 'lock',
    path: freshId('write/plain'),
  },
  writeLocked: {
    label: 'GET /write/locked/:id (@Locked, fenced SQLite write)',
    app: 'lock',
    path: freshId('write/locked'),
  },
  writeFloor: {
    label: 'GET /write/floor/:id (SQLite write under the raw floor lock, no library)',
    app: 'lock',
    path: freshId('write/floor'),
  },
  lockedApClients: {
    label: 'GET /locked/:id (@Locked), engine on auto-pipelining clients',
    app: 'lockApClients',
    path: freshId('locked'),
  },
  hot: { label: 'GET /locked/hot (@Locked, one id)', app: 'lock', path: () => '/locked/hot' },
  plainOptOut: {
    label: 'GET /plain/:id, contextInterceptor: false',
    app: 'optOut',
    path: freshId('plain'),
  },
  lockedOptOut: {
    label: 'GET /locked/:id (@Locked + its own interceptor), contextInterceptor: false',
    app: 'optOut',
    path: freshId('locked'),
  },
  bare: {
    label: 'GET /plain/:id, app without RedisLockModule',
    app: 'bare',
    path: freshId('plain'),
  },
};

interface HttpRow {
  readonly nodes: number;
  readonly platform: HttpPlatform;
  readonly endpoint: Endpoint;
  /** Best round's 2xx responses per second. */
  readonly rate: number;
  readonly rates: readonly number[];
  readonly latency: LatencySummary;
  /** CPU µs per request in the app process, the redis-servers, and the bench process (autocannon). */
  readonly appCpu: number;
  readonly redisCpu: number;
  readonly loadCpu: number;
  /** Cores the app process kept busy on average. */
  readonly appCores: number;
  readonly requests: number;
  readonly non2xx: number;
  readonly errors: number;
  readonly error?: string;
}

interface Shot {
  readonly ok: number;
  readonly non2xx: number;
  readonly errors: number;
  readonly seconds: number;
}

/** One autocannon run: `CONNECTIONS` connections, a fresh path per request. */
function fire(
  app: HttpApp,
  endpoint: Endpoint,
  run: string,
  ms: number,
  latency: LatencyRecorder | undefined,
): Promise<Shot> {
  const { path } = ENDPOINTS[endpoint];
  let i = 0;
  return new Promise((resolve, reject) => {
    const instance = autocannon(
      {
        url: app.url,
        connections: CONNECTIONS,
        pipelining: 1,
        duration: ms / 1000,
        requests: [
          {
            method: 'GET',
            setupRequest: (request) => ({ ...request, path: path(run, i++) }),
          },
        ],
      },
      (error, result) => {
        if (error) return reject(error);
        resolve({
          ok: result['2xx'],
          non2xx: result.non2xx,
          errors: result.errors,
          seconds: result.duration,
        });
      },
    );
    if (latency) {
      instance.on('response', (_client, statusCode: number, _bytes, responseTime: number) => {
        if (statusCode < 300) latency.record(responseTime);
      });
    }
  });
}

interface Tally {
  readonly rates: number[];
  readonly latency: LatencyRecorder;
  appTicks: number;
  redisSeconds: number;
  loadMicros: number;
  seconds: number;
  requests: number;
  non2xx: number;
  errors: number;
}

function tally(): Tally {
  return {
    rates: [],
    latency: new LatencyRecorder(),
    appTicks: 0,
    redisSeconds: 0,
    loadMicros: 0,
    seconds: 0,
    requests: 0,
    non2xx: 0,
    errors: 0,
  };
}

/** One measured run of `endpoint`, added to `into`. */
async function measure(
  context: BenchContext,
  app: HttpApp,
  count: number,
  endpoint: Endpoint,
  run: string,
  into: Tally,
): Promise<void> {
  const redis0 = await context.redisCpuSeconds(count);
  const app0 = processTicks(app.pid);
  const load0 = process.cpuUsage();
  const shot = await fire(app, endpoint, run, context.timing.httpMeasureMs, into.latency);
  const load = process.cpuUsage(load0);
  into.appTicks += processTicks(app.pid) - app0;
  into.redisSeconds += (await context.redisCpuSeconds(count)) - redis0;
  into.loadMicros += load.user + load.system;
  into.seconds += shot.seconds;
  into.requests += shot.ok + shot.non2xx;
  into.non2xx += shot.non2xx;
  into.errors += shot.errors;
  into.rates.push(shot.ok / shot.seconds);
}

function row(
  nodes: number,
  platform: HttpPlatform,
  endpoint: Endpoint,
  t: Tally,
  context: BenchContext,
): HttpRow {
  const perRequest = (micros: number) => (t.requests > 0 ? micros / t.requests : NaN);
  const result: HttpRow = {
    nodes,
    platform,
    endpoint,
    rate: t.rates.length > 0 ? Math.max(...t.rates) : NaN,
    rates: t.rates,
    latency: t.latency.summary(),
    appCpu: perRequest((t.appTicks / TICKS_PER_SECOND) * 1e6),
    redisCpu: perRequest(t.redisSeconds * 1e6),
    loadCpu: perRequest(t.loadMicros),
    appCores: t.seconds > 0 ? t.appTicks / TICKS_PER_SECOND / t.seconds : NaN,
    requests: t.requests,
    non2xx: t.non2xx,
    errors: t.errors,
  };
  context.log(
    `  ${nodes} node(s)  ${platform.padEnd(8)} ${ENDPOINTS[endpoint].label.padEnd(44)} ${formatRate(result.rate).padStart(7)} req/s  p50 ${formatMs(result.latency.p50)}  p99 ${formatMs(result.latency.p99)}  CPU/req app ${result.appCpu.toFixed(0)} µs (${result.appCores.toFixed(2)} cores), redis ${result.redisCpu.toFixed(1)} µs, autocannon ${result.loadCpu.toFixed(0)} µs` +
      (result.non2xx || result.errors ? `  non-2xx ${result.non2xx}, errors ${result.errors}` : ''),
  );
  return result;
}

function failedRow(
  nodes: number,
  platform: HttpPlatform,
  endpoint: Endpoint,
  error: Error,
  context: BenchContext,
): HttpRow {
  context.log(
    `  ${nodes} node(s)  ${platform} ${ENDPOINTS[endpoint].label}: FAILED ${error.message}`,
  );
  const empty = { count: 0, p50: NaN, p99: NaN, max: NaN };
  return {
    nodes,
    platform,
    endpoint,
    rate: NaN,
    rates: [],
    latency: empty,
    appCpu: NaN,
    redisCpu: NaN,
    loadCpu: NaN,
    appCores: NaN,
    requests: 0,
    non2xx: 0,
    errors: 0,
    error: error.message,
  };
}

/**
 * Starts the app processes the endpoints need (side by side; an idle one
 * costs nothing), runs the endpoints in interleaved rounds, then each of
 * `extra` once; returns a row per endpoint.
 */
async function measureApps(
  context: BenchContext,
  platform: HttpPlatform,
  count: number,
  endpoints: readonly Endpoint[],
  extra: readonly Endpoint[],
): Promise<HttpRow[]> {
  const { httpRounds, httpWarmupMs } = context.timing;
  await context.reset();
  const apps = new Map<AppKind, HttpApp>();
  const appOf = (endpoint: Endpoint) => apps.get(ENDPOINTS[endpoint].app) as HttpApp;
  try {
    for (const kind of new Set([...endpoints, ...extra].map((e) => ENDPOINTS[e].app))) {
      const app = await startHttpApp(platform, kind === 'bare' ? undefined : context.urls(count), {
        autoPipeliningClients: kind === 'lockApClients',
        noContextInterceptor: kind === 'optOut',
      });
      apps.set(kind, app);
      context.childStarted(app.pid);
    }
    for (const endpoint of endpoints) {
      await fire(appOf(endpoint), endpoint, `w-${endpoint}`, httpWarmupMs, undefined);
    }
    const tallies = new Map(endpoints.map((e) => [e, tally()]));
    for (let round = 0; round < httpRounds; round++) {
      const order = round % 2 === 0 ? endpoints : [...endpoints].reverse();
      for (const endpoint of order) {
        await measure(
          context,
          appOf(endpoint),
          count,
          endpoint,
          `r${round}`,
          tallies.get(endpoint) as Tally,
        );
      }
    }
    const rows = endpoints.map((e) => row(count, platform, e, tallies.get(e) as Tally, context));
    for (const endpoint of extra) {
      const t = tally();
      await fire(appOf(endpoint), endpoint, 'w-extra', Math.min(500, httpWarmupMs), undefined);
      await measure(context, appOf(endpoint), count, endpoint, 'extra', t);
      rows.push(row(count, platform, endpoint, t, context));
    }
    return rows;
  } catch (error) {
    return [...endpoints, ...extra].map((e) =>
      failedRow(count, platform, e, error as Error, context),
    );
  } finally {
    for (const app of apps.values()) {
      context.childExiting(app.pid);
      await app.stop();
    }
  }
}

/** The pairs every node count measures in interleaved rounds: locked and unlocked, by decorator and by hand. */
const MAIN_ENDPOINTS: readonly Endpoint[] = [
  'plain',
  'locked',
  'byHand',
  'writePlain',
  'writeLocked',
  'writeFloor',
];

export const httpScenario: Scenario = {
  number: 4,
  id: 'http',
  title: 'HTTP: a Nest endpoint with and without @Locked()',
  description:
    `A Nest app (bench/http/app.module.ts, compiled with tsc) in a Node.js process of its own, with RedisLockModule.forRoot({ nodes }) and its defaults ` +
    '(auto-extension, the lock-context interceptor on every handler, fencing, release notifications), ' +
    "serves `GET /plain/:id` and `GET /locked/:id` with `@Locked('item:<0>')`; both are async and return the same small JSON. " +
    "`GET /by-hand/:id` does the same as the locked one with `LockService.using()` in the handler; `GET /write/plain/:id` and `GET /write/locked/:id` write a row of an SQLite file, the locked one fenced by the lock's token; `GET /write/floor/:id` does the plain write under the raw floor's lock (no library), the bound for any lock. " +
    `autocannon, in the bench process, keeps ${CONNECTIONS} keep-alive connections busy, with a new id on every request (no contention). ` +
    'The endpoints run in interleaved rounds; req/s is the best round. ' +
    'Besides: the locked endpoint of a second app process whose engine was given auto-pipelining clients, every request on one id (the lock is contended and requests queue for it; one run), and, on the first node count, both endpoints of an app with `contextInterceptor: false` (the interceptor applied to the locked handler only) and the unlocked endpoint of an app without RedisLockModule.',
  defaultNodes: [1, 3],
  async run(context: BenchContext): Promise<ScenarioResult> {
    const rows: HttpRow[] = [];
    const counts = context.nodeCounts(this.defaultNodes);
    for (const count of counts) {
      for (const platform of PLATFORMS) {
        rows.push(
          ...(await measureApps(
            context,
            platform,
            count,
            count === counts[0]
              ? [...MAIN_ENDPOINTS, 'lockedApClients', 'plainOptOut', 'lockedOptOut', 'bare']
              : [...MAIN_ENDPOINTS, 'lockedApClients'],
            ['hot'],
          )),
        );
      }
    }
    await context.reset();

    const find = (n: number, platform: HttpPlatform, endpoint: Endpoint) =>
      rows.find(
        (r) => r.nodes === n && r.platform === platform && r.endpoint === endpoint && !r.error,
      );
    const headlines = (context.shared.get(HEADLINES) ?? {}) as Headlines;
    headlines.http = counts.flatMap((n) =>
      PLATFORMS.map((platform) => ({
        nodes: n,
        platform,
        plain: find(n, platform, 'plain')?.rate,
        locked: find(n, platform, 'locked')?.rate,
        lockedApClients: find(n, platform, 'lockedApClients')?.rate,
        bare: find(n, platform, 'bare')?.rate,
        hot: find(n, platform, 'hot')?.rate,
        plainP99: find(n, platform, 'plain')?.latency.p99,
        lockedP99: find(n, platform, 'locked')?.latency.p99,
        paired: pairedRatio(
          find(n, platform, 'locked')?.rates ?? [],
          find(n, platform, 'plain')?.rates ?? [],
        ),
        byHand: find(n, platform, 'byHand')?.rate,
        pairedByHand: pairedRatio(
          find(n, platform, 'locked')?.rates ?? [],
          find(n, platform, 'byHand')?.rates ?? [],
        ),
        writePlain: find(n, platform, 'writePlain')?.rate,
        writeLocked: find(n, platform, 'writeLocked')?.rate,
        pairedWrite: pairedRatio(
          find(n, platform, 'writeLocked')?.rates ?? [],
          find(n, platform, 'writePlain')?.rates ?? [],
        ),
        writeFloor: find(n, platform, 'writeFloor')?.rate,
      })),
    );
    context.shared.set(HEADLINES, headlines);

    const table: ReportTable = {
      title: 'Requests per second, plain vs @Locked()',
      headers: [
        'nodes',
        'platform',
        'endpoint',
        'req/s (best round)',
        'rounds min–max',
        'latency p50',
        'latency p99',
        'CPU µs/request: app',
        'redis',
        'autocannon',
        'app process (cores)',
        '× unlocked endpoint',
        'non-2xx / errors',
      ],
      align: ['r', 'l', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
      rows: rows.map((r) => {
        const label =
          r.endpoint === 'locked'
            ? `**${ENDPOINTS[r.endpoint].label}**`
            : ENDPOINTS[r.endpoint].label;
        if (r.error) {
          return [
            String(r.nodes),
            r.platform,
            label,
            `failed: ${r.error}`,
            ...new Array<string>(9).fill(''),
          ];
        }
        const plain = find(r.nodes, r.platform, 'plain');
        return [
          String(r.nodes),
          r.platform,
          label,
          formatRate(r.rate),
          r.rates.length > 1
            ? `${formatRate(Math.min(...r.rates))}–${formatRate(Math.max(...r.rates))}`
            : '',
          formatMs(r.latency.p50),
          formatMs(r.latency.p99),
          r.appCpu.toFixed(0),
          r.redisCpu.toFixed(1),
          r.loadCpu.toFixed(0),
          r.appCores.toFixed(2),
          r.endpoint === 'plain' || r.endpoint === 'writePlain'
            ? '1.00×'
            : formatRatio(
                r.rate,
                (r.endpoint === 'writeLocked' || r.endpoint === 'writeFloor'
                  ? find(r.nodes, r.platform, 'writePlain')
                  : plain
                )?.rate,
              ),
          `${r.non2xx} / ${r.errors}`,
        ];
      }),
      notes: [
        '"× unlocked endpoint": req/s over `GET /plain/:id` of the app with RedisLockModule on the same node count; for the fenced write, over `GET /write/plain/:id`, the same SQLite write without a lock (the target: ≥ 0.85×). `GET /by-hand/:id` does what `@Locked(\'item:<0>\')` does with `LockService.using()` in the handler (the target: `@Locked()` within 3 % of it).',
        'The write endpoints upsert a row of an SQLite file (WAL, synchronous NORMAL, as the sample keeps its shop) and add one to its count; the locked one does it as a lock holder must, through nestjs-redis-lock/fenced: a claim that registers the token on the row, then a write where the row still carries it.',
        '`GET /write/floor/:id` is the plain write under the cheapest lock Redis allows, with no library: the raw floor of scenario 1 (`SET key value NX PX` on every node, then a compare-and-delete script, each round done at a majority; no token, no extension, no retry) on ioredis clients of its own to the same nodes. No lock library can do less per request, so its ratio bounds what any of them keeps of the unlocked write on this machine.',
        '"CPU µs/request": the app process (read from /proc, 10 ms ticks), the redis-servers (all nodes), and the bench process, which runs autocannon. On 2 cores the app, autocannon and the redis-servers share the machine, so req/s is bounded by all three; CPU per request is the steadier figure for what the lock costs the app.',
        'Latency: from autocannon’s per-response times (µs resolution), 2xx responses only, over all rounds.',
        'The `hot` row sends every request to one id: @Locked waits (default: wait up to 10 s), and the app’s waiters queue first come first served, so requests/s there is the rate at which one lock passes from request to request (two Redis round trips per hand-off).',
        'The plain endpoint in the app with RedisLockModule also passes through the lock-context interceptor (registered for every handler by default); the "app without RedisLockModule" row shows what that costs. Most of it is not the interceptor’s own work but what any interceptor brings: Nest runs a handler that has one through an rxjs pipeline (defer, mergeAll, a ReplaySubject, lastValueFrom) and two AsyncResources per request, and the AsyncLocalStorage the lock context needs turns on a promise hook for every Promise of the process. The `contextInterceptor: false` rows show the opt-out: handlers without an interceptor skip all of that; the locked one keeps the 409/503/400 answers through its own `@UseInterceptors(LockContextInterceptor)`.',
      ],
    };
    const charts: ChartPanel[] = [
      {
        title: `HTTP requests/s, Nest app, ${CONNECTIONS} connections`,
        unit: 'req/s',
        groups: counts.flatMap((n) =>
          PLATFORMS.map((platform) => ({
            label: `${platform}, ${n} node${n > 1 ? 's' : ''}`,
            bars: rows
              .filter((r) => r.nodes === n && r.platform === platform && !r.error)
              .map((r) => ({ series: ENDPOINTS[r.endpoint].label, value: r.rate })),
          })),
        ),
      },
    ];
    return { tables: [table], charts, data: rows };
  },
};
