import { Agent, request } from 'node:http';

export interface LoadOptions {
  /** Base URLs of the instances; request i goes to targets[i % n]. */
  readonly targets: readonly string[];
  /** e.g. `/products/1/purchase` */
  readonly path: string;
  readonly requests: number;
  /** Requests in flight at once, spread evenly over the targets. */
  readonly concurrency: number;
  /** Called every ~100 ms while the load runs, and once at the end. */
  readonly onProgress?: (counters: Readonly<LoadCounters>) => void;
}

/** How the buyers were answered. */
export interface LoadCounters {
  done: number;
  /** 201: bought one. */
  sold: number;
  /** 409 with a lock code: another buyer's checkout held the item (Retry-After). */
  busy: number;
  /** 410: sold out. */
  soldOut: number;
  /** 409 STALE_TOKEN: the database refused a write by its fencing token. */
  fenced: number;
  /** Anything else: 5xx, unexpected statuses, network errors. */
  errors: number;
}

export interface LoadResult extends LoadCounters {
  readonly requests: number;
  readonly durationMs: number;
  readonly latencyMs: {
    readonly p50: number;
    readonly p95: number;
    readonly p99: number;
    readonly max: number;
  };
  /** A few of the errors, to say what went wrong. */
  readonly errorSamples: readonly string[];
}

interface Answer {
  readonly status: number;
  readonly body: string;
}

/**
 * Fires `requests` POSTs at the instances with `concurrency` in flight,
 * over keep-alive connection pools (one per instance), and counts the answers.
 */
export async function runLoad(options: LoadOptions): Promise<LoadResult> {
  const { targets, requests, concurrency } = options;
  const perTarget = Math.max(1, Math.ceil(concurrency / targets.length));
  const agents = targets.map(() => new Agent({ keepAlive: true, maxSockets: perTarget }));
  const urls = targets.map((base) => new URL(options.path, base));
  const counters: LoadCounters = { done: 0, sold: 0, busy: 0, soldOut: 0, fenced: 0, errors: 0 };
  const latencies = new Float64Array(requests);
  const errorSamples: string[] = [];
  const progress = options.onProgress
    ? setInterval(() => options.onProgress!({ ...counters }), 100)
    : undefined;

  let next = 0;
  const worker = async () => {
    for (let i = next++; i < requests; i = next++) {
      const target = i % targets.length;
      const started = performance.now();
      try {
        const answer = await post(urls[target], agents[target]);
        latencies[i] = performance.now() - started;
        const kind = classify(answer);
        counters[kind]++;
        if (kind === 'errors' && errorSamples.length < 5)
          errorSamples.push(`${answer.status} ${answer.body.slice(0, 200)}`);
      } catch (error) {
        latencies[i] = performance.now() - started;
        counters.errors++;
        if (errorSamples.length < 5) errorSamples.push((error as Error).message);
      }
      counters.done++;
    }
  };

  const started = performance.now();
  try {
    await Promise.all(Array.from({ length: Math.min(concurrency, requests) }, worker));
  } finally {
    clearInterval(progress);
    for (const agent of agents) agent.destroy();
  }
  const durationMs = Math.round(performance.now() - started);
  options.onProgress?.({ ...counters });
  latencies.sort();
  return {
    ...counters,
    requests,
    durationMs,
    latencyMs: {
      p50: percentile(latencies, 0.5),
      p95: percentile(latencies, 0.95),
      p99: percentile(latencies, 0.99),
      max: round(latencies[latencies.length - 1] ?? 0),
    },
    errorSamples,
  };
}

function classify({ status, body }: Answer): Exclude<keyof LoadCounters, 'done'> {
  if (status === 201) return 'sold';
  if (status === 410) return 'soldOut';
  if (status === 409) {
    const code = codeOf(body);
    if (code === 'STALE_TOKEN') return 'fenced';
    if (code === 'LOCK_BUSY' || code === 'LOCK_TIMEOUT') return 'busy';
  }
  return 'errors';
}

function codeOf(body: string): string | undefined {
  try {
    return (JSON.parse(body) as { code?: string }).code;
  } catch {
    return undefined;
  }
}

/** Nearest-rank percentile of sorted values, in ms to 0.1. */
function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return 0;
  return round(sorted[Math.min(sorted.length - 1, Math.ceil(p * sorted.length) - 1)]);
}

function round(value: number): number {
  return Math.round(value * 10) / 10;
}

function post(url: URL, agent: Agent): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      { method: 'POST', agent, headers: { 'content-length': '0' } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString() }),
        );
        res.on('error', reject);
      },
    );
    req.setTimeout(30_000, () => req.destroy(new Error(`no answer from ${url.host} in 30 s`)));
    req.on('error', reject);
    req.end();
  });
}
