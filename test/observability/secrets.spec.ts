import 'reflect-metadata';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { Module, type DynamicModule, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import {
  LockConfigurationError,
  LockEngine,
  LockOptionsError,
  LockService,
  LockUnavailableError,
  RedisLockModule,
  type LockNodeSpec,
  type RedisLockModuleOptions,
} from '../../lib/index.js';
import { LogCapture } from '../support/log-capture.js';
import { quietLogger } from '../support/quiet-logger.js';
import {
  startRedisNodes,
  stopRedisNodes,
  type RedisNodeProcess,
} from '../../dev/redis/redis-nodes.js';

/** Distinctive, so that any trace of it in any output is found. */
const PASSWORD = `Pw-${randomBytes(9).toString('base64url')}`;
const WRONG_PASSWORD = `Wrong-${randomBytes(9).toString('base64url')}`;
const TLS_KEY = generateKeyPairSync('ec', { namedCurve: 'P-256' })
  .privateKey.export({ type: 'pkcs8', format: 'pem' })
  .toString();
/** Any 24 characters of the key's body would give it away. */
const KEY_PARTS = TLS_KEY.replace(/-----[A-Z ]+-----/g, '')
  .replace(/\s+/g, '')
  .match(/.{24}/g)!;
const SECRETS = [
  PASSWORD,
  encodeURIComponent(PASSWORD),
  WRONG_PASSWORD,
  encodeURIComponent(WRONG_PASSWORD),
  ...KEY_PARTS,
];

/** Everything an error can show: message, stack and causes. */
function errorText(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const failures = (error as { failures?: { error: Error }[] }).failures ?? [];
  return [error.stack ?? '', error.message, ...failures.map((f) => errorText(f.error))]
    .concat(error.cause === undefined ? [] : [errorText(error.cause)])
    .join('\n');
}

function appModule(options: RedisLockModuleOptions): DynamicModule {
  @Module({})
  class AppModule {}
  return { module: AppModule, imports: [RedisLockModule.forRoot(options)] };
}

describe('no secret in any log line, warning or error message', () => {
  let secured: RedisNodeProcess[];
  /** Killed: its port refuses connections. */
  let gone: RedisNodeProcess;
  let app: INestApplicationContext | undefined;
  /** Everything said anywhere during a test: Nest logs, console, errors, health reports. */
  let logs: LogCapture;
  let said: string[];
  const consoleMethods = ['log', 'info', 'warn', 'error', 'debug', 'trace'] as const;
  const originalConsole = consoleMethods.map((name) => [name, console[name]] as const);

  const url = (node: RedisNodeProcess, password = PASSWORD, scheme = 'redis') =>
    `${scheme}://:${encodeURIComponent(password)}@${node.host}:${node.port}`;

  beforeAll(async () => {
    [secured, [gone]] = await Promise.all([
      startRedisNodes(2, { requirepass: PASSWORD }),
      startRedisNodes(1, { requirepass: PASSWORD }),
    ]);
    await gone.kill();
  });
  afterAll(() => stopRedisNodes([...secured, gone]));

  beforeEach(() => {
    logs = new LogCapture();
    said = [];
    for (const name of consoleMethods)
      console[name] = (...args: unknown[]) => void said.push(args.map(String).join(' '));
  });
  afterEach(async () => {
    for (const [name, original] of originalConsole) console[name] = original;
    await app?.close();
    app = undefined;
    await Promise.all(secured.map((n) => n.ensureRunning()));
  });

  /** Asserts that nothing said contains a secret, and that enough was said for that to mean something. */
  function expectNoSecrets(minimumLines: number): void {
    const everything = [logs.text, ...said].join('\n');
    expect(logs.lines.length + said.length).toBeGreaterThanOrEqual(minimumLines);
    for (const secret of SECRETS) expect(everything).not.toContain(secret);
  }

  async function startApp(options: RedisLockModuleOptions): Promise<LockService> {
    app = await NestFactory.createApplicationContext(appModule(options), {
      logger: logs,
      abortOnError: false,
    });
    return app.get(LockService);
  }

  it('passwords in redis:// URLs and in password options: start-up warnings, debug lines, lost locks, missed releases, outages and health reports', async () => {
    const locks = await startApp({
      nodes: [
        url(secured[0]),
        { host: secured[1].host, port: secured[1].port, password: PASSWORD },
        url(gone),
      ],
      logging: 'debug',
    });
    // A node that is down: warned about at start-up, then missed by every release.
    const lock = await locks.acquire('secrets:a');
    await lock.extend();
    await lock.release();
    const held = await locks.acquire('secrets:b');
    // Busy (or, decided early by the node that is down, unavailable): an error either way.
    said.push(errorText(await locks.tryAcquire('secrets:b').catch((e: unknown) => e)));
    // Lost while held: its lease runs out.
    const short = await locks.acquire('secrets:c', { ttl: 100 });
    const lost = new Promise((resolve) => short.signal.addEventListener('abort', resolve));
    await lost;
    await short.release();
    // An outage: one node of three left.
    await secured[1].kill();
    const outage = await locks.tryAcquire('secrets:d').catch((e: unknown) => e);
    expect(outage).toBeInstanceOf(LockUnavailableError);
    said.push(errorText(outage), JSON.stringify(await locks.health()));
    await held.release();

    const levels = new Set(logs.of('RedisLock').map((l) => l.level));
    expect(levels).toEqual(new Set(['debug', 'warn', 'error']));
    expectNoSecrets(10);
  });

  it('a wrong password: the refusal at start-up (strict) and its warnings (not strict)', async () => {
    // Refused at once (WRONGPASS), so the start-up does not wait for the nodes.
    const nodes = [...secured.map((n) => url(n, WRONG_PASSWORD)), url(secured[0])];
    const refused = await startApp({ nodes, strict: true }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(LockConfigurationError);
    expect((refused as Error).message).toContain('WRONGPASS');
    said.push(errorText(refused));

    await startApp({ nodes });
    const locks = app!.get(LockService);
    said.push(errorText(await locks.tryAcquire('secrets:e').catch((e: unknown) => e)));
    expect(logs.of('RedisLock', 'warn').length).toBeGreaterThan(0);
    expectNoSecrets(3);
  });

  it('a TLS key and password (rediss:// and tls options against servers that do not speak TLS)', async () => {
    const tlsNode = (node: RedisNodeProcess): LockNodeSpec => ({
      host: node.host,
      port: node.port,
      password: PASSWORD,
      tls: { key: TLS_KEY, rejectUnauthorized: true },
    });
    const refused = await startApp({
      nodes: [tlsNode(secured[0]), tlsNode(secured[1]), url(gone, PASSWORD, 'rediss')],
      strict: true,
    }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(LockConfigurationError);
    said.push(errorText(refused));
    expectNoSecrets(1);
  });

  it('invalid options: the LockOptionsError names the option, never its value', async () => {
    const attempts: LockNodeSpec[][] = [
      [`redis://:${PASSWORD}@127.0.0.1:notaport`],
      [`http://:${PASSWORD}@127.0.0.1:6379`],
    ];
    for (const nodes of attempts) {
      const error = await startApp({ nodes }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(LockOptionsError);
      said.push(errorText(error));
    }
    const engineError = (() => {
      try {
        return new LockEngine({
          nodes: [url(secured[0])],
          logger: quietLogger(),
          pasword: PASSWORD,
        } as never);
      } catch (error) {
        return error;
      }
    })();
    expect(engineError).toBeInstanceOf(LockOptionsError);
    expect((engineError as Error).message).toContain("has no option 'pasword'");
    said.push(errorText(engineError));
    expectNoSecrets(3);
  });

  it('an engine left to its default console logger', async () => {
    const engine = new LockEngine({
      nodes: [url(secured[0]), url(secured[1]), url(secured[0], WRONG_PASSWORD)],
    });
    try {
      await engine.connect();
      const lock = await engine.acquire('secrets:f');
      await lock.release();
      expect(said.some((line) => line.includes('unreachable at start-up'))).toBe(true);
      expect(said.some((line) => line.includes('did not reach node'))).toBe(true);
    } finally {
      await engine.close();
    }
    expectNoSecrets(2);
  });
});
