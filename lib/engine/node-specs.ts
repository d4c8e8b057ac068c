import type { Cluster, Redis } from 'ioredis';
import type { ClusterNodeSpec } from './lock-options.js';
import { describe, fail, isObject } from './option-checks.js';

// What a node spec may be (a URL, ioredis options, a cluster or Sentinel spec, a client) and
// the checks that say what is wrong with one.

/** True for an ioredis client, `Redis` or `Cluster` (or one that quacks like it). */
export function isRedisClient(value: unknown): value is Redis {
  return isObject(value) && typeof value.evalsha === 'function' && typeof value.status === 'string';
}

/** True for an ioredis `Cluster` client. */
export function isClusterClient(value: unknown): value is Cluster {
  return isRedisClient(value) && (value as unknown as { isCluster?: unknown }).isCluster === true;
}

/** True for `{ cluster: [...] }`, the options of a cluster the engine opens. */
export function isClusterSpec(value: unknown): value is ClusterNodeSpec {
  return isObject(value) && !isRedisClient(value) && 'cluster' in value;
}

const CLUSTER_EXAMPLE =
  "{ cluster: [{ host: '10.0.0.1', port: 7000 }], options: { redisOptions: { password } } }";
const SENTINEL_EXAMPLE = "{ sentinels: [{ host: '10.0.0.1', port: 26379 }], name: 'mymaster' }";

function isPort(value: unknown): boolean {
  return typeof value === 'number' && Number.isInteger(value) && value > 0 && value <= 65535;
}

function checkUrl(where: string, spec: string): void {
  let url: URL;
  try {
    url = new URL(spec);
  } catch {
    fail(`${where} is not a URL; write it as redis://host:6379 or rediss://host:6380 for TLS.`);
  }
  if (url.protocol !== 'redis:' && url.protocol !== 'rediss:') {
    fail(`${where} uses '${url.protocol}'; use redis:// or rediss:// (TLS).`);
  }
  try {
    decodeURIComponent(url.username);
    decodeURIComponent(url.password);
  } catch {
    fail(
      `${where} has a malformed %-escape in its user name or password; percent-encode them as UTF-8.`,
    );
  }
  if (url.searchParams.has('sentinels') || url.searchParams.has('name')) {
    fail(
      `${where}: Sentinel settings do not go in a URL; give { sentinels: [{ host, port }], name: 'mymaster' }.`,
    );
  }
}

function checkClusterSpec(where: string, spec: Record<string, unknown>): void {
  for (const key of Object.keys(spec)) {
    if (key !== 'cluster' && key !== 'options' && spec[key] !== undefined) {
      fail(
        `${where} is a cluster and takes only 'cluster' (the seed nodes) and 'options' (ioredis Cluster options), ` +
          `not '${key}'; connection settings go in options.redisOptions, e.g. ${CLUSTER_EXAMPLE}.`,
      );
    }
  }
  const seeds = spec.cluster;
  if (!Array.isArray(seeds) || seeds.length === 0) {
    fail(
      `${where}.cluster must list one or more seed nodes of the cluster, e.g. ${CLUSTER_EXAMPLE} (got ${describe(seeds)}).`,
    );
  }
  seeds.forEach((seed: unknown, i) => {
    const at = `${where}.cluster[${i}]`;
    if (typeof seed === 'string') return checkUrl(at, seed);
    if (
      !isObject(seed) ||
      !isPort(seed.port) ||
      (seed.host !== undefined && typeof seed.host !== 'string')
    ) {
      fail(
        `${at} must be a redis://host:port URL or { host, port } with a TCP port number (got ${describe(seed)}).`,
      );
    }
  });
  if (spec.options !== undefined && (!isObject(spec.options) || Array.isArray(spec.options))) {
    fail(
      `${where}.options must be ioredis Cluster options such as { redisOptions: { password } } (got ${describe(spec.options)}).`,
    );
  }
}

function checkSentinelSpec(where: string, spec: Record<string, unknown>): void {
  const { sentinels, name } = spec;
  if (
    !Array.isArray(sentinels) ||
    sentinels.length === 0 ||
    !sentinels.every((s: unknown) => isObject(s) && (s.port === undefined || isPort(s.port)))
  ) {
    fail(
      `${where}.sentinels must list the Sentinels as { host, port } objects, e.g. ${SENTINEL_EXAMPLE} (got ${describe(sentinels)}).`,
    );
  }
  if (typeof name !== 'string' || name.length === 0) {
    fail(
      `${where} reaches its master through Sentinel: also give the master's name as Sentinel knows it, e.g. ${SENTINEL_EXAMPLE}.`,
    );
  }
}

export function checkNodeSpec(spec: unknown, index: number): void {
  const where = `nodes[${index}]`;
  if (typeof spec === 'string') return checkUrl(where, spec);
  if (isRedisClient(spec)) return;
  if (isObject(spec) && !Array.isArray(spec)) {
    if ('cluster' in spec) return checkClusterSpec(where, spec);
    if ('clusters' in spec || 'startupNodes' in spec) {
      fail(`${where}: write a Redis Cluster as ${CLUSTER_EXAMPLE}.`);
    }
    if (spec.port !== undefined && !isPort(spec.port)) {
      fail(`${where}.port must be a TCP port number (got ${describe(spec.port)}).`);
    }
    if ('sentinels' in spec) return checkSentinelSpec(where, spec);
    if (spec.host === undefined && spec.port === undefined && spec.path === undefined) {
      fail(`${where} names no server; give { host, port } (or a redis:// URL).`);
    }
    return;
  }
  fail(
    `${where} must be a redis:// URL, ioredis options ({ host, port, ... } or { sentinels, name }), ` +
      `a cluster (${CLUSTER_EXAMPLE}) or an ioredis client (got ${describe(spec)}).`,
  );
}
