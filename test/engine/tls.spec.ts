/**
 * Locks over TLS, against redis-server nodes that serve TLS only (the
 * Debian build has it), with a throwaway CA and certificates made by
 * `openssl` for this run in a temporary directory.
 *
 * A `rediss://` URL string verifies the server against the system CAs;
 * to trust a private CA, give the node as ioredis options
 * (`{ host, port, tls: { ca } }`) or as a client made with
 * `new Redis('rediss://…', { tls: { ca } })`.
 */
import 'reflect-metadata';
import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { accessSync, constants, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { TLSSocket } from 'node:tls';
import { promisify } from 'node:util';
import { Redis, type RedisOptions } from 'ioredis';
import {
  LockContext,
  Locked,
  LockEngine,
  LockUnavailableError,
  RedisLockModule,
  type LockNodeSpec,
} from '../../lib/index.js';
import { failOnUnhandledRejections } from '../input/unhandled-rejections.js';
import { quietLogger } from '../support/quiet-logger.js';
import { timedHandOff } from '../support/lock-events.js';
import { RedisNodeProcess } from '../../dev/redis/redis-nodes.js';

const run = promisify(execFile);
const ACL_PASSWORD = 'tls-user-pw';

failOnUnhandledRejections();

function findOpenssl(): string {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    const candidate = join(dir || '.', 'openssl');
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  throw new Error(
    "openssl not found: the TLS tests make their certificates with it; install it with 'apt-get install -y openssl'",
  );
}

interface Pki {
  readonly dir: string;
  readonly ca: Buffer;
  readonly otherCa: Buffer;
  readonly clientCert: Buffer;
  readonly clientKey: Buffer;
  readonly files: { certFile: string; keyFile: string; caFile: string };
}

/** A CA, a server certificate for 127.0.0.1 signed by it, a client certificate, and an unrelated CA. */
async function makePki(): Promise<Pki> {
  const openssl = findOpenssl();
  const dir = await mkdtemp(join(tmpdir(), 'redis-lock-tls-'));
  const at = (name: string) => join(dir, name);
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  const selfSigned = (name: string, cn: string) =>
    run(openssl, [
      'req',
      '-x509',
      ...ec,
      '-keyout',
      at(`${name}.key`),
      '-out',
      at(`${name}.crt`),
      '-days',
      '1',
      '-subj',
      `/CN=${cn}`,
    ]);
  const signed = async (name: string, cn: string, extensions: string) => {
    writeFileSync(at(`${name}.ext`), extensions);
    await run(openssl, [
      'req',
      ...ec,
      '-keyout',
      at(`${name}.key`),
      '-out',
      at(`${name}.csr`),
      '-subj',
      `/CN=${cn}`,
    ]);
    await run(openssl, [
      'x509',
      '-req',
      '-in',
      at(`${name}.csr`),
      '-CA',
      at('ca.crt'),
      '-CAkey',
      at('ca.key'),
      '-set_serial',
      `0x${randomUUID().replace(/-/g, '')}`,
      '-days',
      '1',
      '-extfile',
      at(`${name}.ext`),
      '-out',
      at(`${name}.crt`),
    ]);
  };
  await Promise.all([
    selfSigned('ca', 'redis-lock test CA'),
    selfSigned('other-ca', 'unrelated CA'),
  ]);
  await Promise.all([
    signed('server', '127.0.0.1', 'subjectAltName=IP:127.0.0.1,DNS:localhost\n'),
    signed('client', 'lock-client', 'extendedKeyUsage=clientAuth\n'),
  ]);
  return {
    dir,
    ca: readFileSync(at('ca.crt')),
    otherCa: readFileSync(at('other-ca.crt')),
    clientCert: readFileSync(at('client.crt')),
    clientKey: readFileSync(at('client.key')),
    files: { certFile: at('server.crt'), keyFile: at('server.key'), caFile: at('ca.crt') },
  };
}

let pki: Pki;
/** TLS only (`--port 0`), no client certificates required. */
let tlsNode: RedisNodeProcess;
/** TLS only, client certificates required (`--tls-auth-clients yes`). */
let mtlsNode: RedisNodeProcess;

const engines: LockEngine[] = [];
const clients: Redis[] = [];
const unique = (name: string) => `${name}-${randomUUID()}`;
const labelOf = (node: RedisNodeProcess) => `${node.host}:${node.port}`;

beforeAll(async () => {
  pki = await makePki();
  [tlsNode, mtlsNode] = await Promise.all([
    RedisNodeProcess.start({ tls: pki.files }),
    RedisNodeProcess.start({ tls: { ...pki.files, authClients: true } }),
  ]);
  await tlsNode.cli(
    'ACL',
    'SETUSER',
    'locker',
    'on',
    `>${ACL_PASSWORD}`,
    '~lock:*',
    '&lock:*',
    '+@all',
  );
}, 30_000);
afterAll(async () => {
  await Promise.all([tlsNode?.stop(), mtlsNode?.stop()]);
  if (pki) rmSync(pki.dir, { recursive: true, force: true });
});
afterEach(async () => {
  await Promise.all(engines.splice(0).map((e) => e.close()));
  await Promise.all(clients.splice(0).map((c) => c.quit()));
});

async function connected(nodes: LockNodeSpec[]) {
  const logger = quietLogger();
  const engine = new LockEngine({ nodes, logger });
  engines.push(engine);
  await engine.connect();
  return Object.assign(engine, { logger });
}

const tlsOptions = (
  node: RedisNodeProcess,
  tls: RedisOptions['tls'] = { ca: pki.ca },
): RedisOptions => ({
  host: node.host,
  port: node.port,
  tls,
});

/** Grants, finds the key through a TLS client of the test's own, releases. */
async function expectLockRoundTrip(engine: LockEngine, node: RedisNodeProcess): Promise<void> {
  const resource = unique('tls');
  const lock = await engine.tryAcquire(resource);
  expect(await node.cli('GET', `lock:{${resource}}`)).toBe(lock.value);
  expect((await lock.release()).released).toBe(true);
  expect(await node.cli('EXISTS', `lock:{${resource}}`)).toBe('0');
}

describe('TLS', () => {
  it('serves TLS only on the test nodes: the plain port is off', async () => {
    expect(await tlsNode.cli('CONFIG', 'GET', 'port')).toBe('port\n0');
    expect(await tlsNode.cli('CONFIG', 'GET', 'tls-port')).toBe(`tls-port\n${tlsNode.port}`);
    expect(tlsNode.url).toBe(`rediss://127.0.0.1:${tlsNode.port}`);
  });

  it('locks over TLS with the node given as ioredis options { host, port, tls: { ca } }, without a warning', async () => {
    const engine = await connected([tlsOptions(tlsNode)]);
    const stream = (engine.nodes[0].client as unknown as { stream: unknown }).stream;
    expect(stream).toBeInstanceOf(TLSSocket);
    expect((stream as TLSSocket).authorized).toBe(true);
    await expectLockRoundTrip(engine, tlsNode);
    expect(engine.logger.warnings).toEqual([]);
  });

  it('locks over TLS as an ACL user through a client made from a rediss:// URL with tls: { ca }, and leaves that client open', async () => {
    const mine = new Redis(`rediss://locker:${ACL_PASSWORD}@127.0.0.1:${tlsNode.port}`, {
      tls: { ca: pki.ca },
    });
    clients.push(mine);
    const engine = await connected([mine]);
    await expectLockRoundTrip(engine, tlsNode);
    expect(await mine.call('ACL', 'WHOAMI')).toBe('locker');
    await engine.close();
    expect(await mine.ping()).toBe('PONG');
  });

  it('carries release notifications over TLS: a waiter of another engine gets the lock as soon as it is freed', async () => {
    const holder = await connected([tlsOptions(tlsNode)]);
    const waiter = await connected([tlsOptions(tlsNode)]);
    const resource = unique('handoff');
    const lock = await holder.tryAcquire(resource);
    // After the second busy attempt the waiter sleeps its (long) delay or hears the release.
    const retry = { delay: 5000, maxDelay: 5000, factor: 1, jitter: 0 };
    const { next, ms } = await timedHandOff(lock, waiter, resource, retry, 2);
    expect(ms).toBeLessThan(2000);
    await next.release();
  });

  it('refuses a node whose certificate does not chain to the CA it was given (another CA, or the system CAs for a bare rediss:// URL) with LockUnavailableError naming the node and the certificate problem', async () => {
    const [wrongCa, systemCas] = await Promise.all([
      connected([tlsOptions(tlsNode, { ca: pki.otherCa })]),
      connected([tlsNode.url]),
    ]);
    for (const engine of [wrongCa, systemCas]) {
      expect(engine.logger.warnings.join('\n')).toMatch(
        new RegExp(`unreachable at start-up \\(${labelOf(tlsNode)}: .*certificate`),
      );
      const error = await engine.tryAcquire(unique('untrusted')).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(LockUnavailableError);
      expect((error as LockUnavailableError).failures.map((f) => f.node)).toEqual([
        labelOf(tlsNode),
      ]);
      expect((error as Error).message).toMatch(/certificate/);
    }
  });

  it("survives a refused TLS socket's second error, which ioredis no longer listens for (the server's alert after the client refused its certificate)", async () => {
    // On a busy machine a few refused handshakes in ten thousand end with the server's
    // "tlsv1 alert decode error" after the certificate error; unheard, it ends the process.
    const client = new Redis({ ...tlsOptions(tlsNode, { ca: pki.otherCa }), lazyConnect: true });
    clients.push(client);
    const engine = new LockEngine({ nodes: [client], logger: quietLogger() });
    engines.push(engine);
    const refused = once(client, 'error');
    void engine.connect();
    const [error] = (await refused) as [Error];
    expect(error.message).toMatch(/certificate/);
    // Still the refused socket: the client replaces it only when it reconnects, after a delay.
    const socket = client.stream;
    expect(socket.destroyed).toBe(true);
    const alert = new Error('tlsv1 alert decode error (SSL alert number 50)');
    expect(() => socket.emit('error', alert)).not.toThrow();
  });

  it('locks on a node that requires client certificates with tls: { ca, cert, key }, and refuses an engine without one with LockUnavailableError naming the node', async () => {
    const withCert = await connected([
      tlsOptions(mtlsNode, { ca: pki.ca, cert: pki.clientCert, key: pki.clientKey }),
    ]);
    await expectLockRoundTrip(withCert, mtlsNode);

    const without = await connected([tlsOptions(mtlsNode)]);
    const error = await without.tryAcquire(unique('no-client-cert')).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockUnavailableError);
    expect((error as Error).message).toContain(labelOf(mtlsNode));
  });

  it('runs a @Locked method under a lock taken over TLS', async () => {
    @Injectable()
    class Reports {
      @Locked('report:<0>')
      async build(_id: string) {
        return LockContext.lock?.isHeld;
      }
    }
    @Module({
      imports: [RedisLockModule.forRoot({ nodes: [tlsOptions(tlsNode)], logger: quietLogger() })],
      providers: [Reports],
    })
    class TlsAppModule {}
    const app = await NestFactory.createApplicationContext(TlsAppModule, { logger: false });
    try {
      await expect(app.get(Reports).build('nightly')).resolves.toBe(true);
    } finally {
      await app.close();
    }
  });
});
