/**
 * The compatibility matrix, run by pack.spec.ts on its packed tarball: each app
 * of test/package/apps (CommonJS on Nest 11, CommonJS on Nest 12, ESM on
 * Nest 12; the same sources, apps/shared/src, under each app's package.json and
 * tsconfig.json) installed with ioredis 5 and with ioredis 6, type-checked by its
 * own tsc and tsconfig.json against the installed declarations, then run with
 * plain `node` against a real redis-server and asked over HTTP.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { existsSync, readFileSync } from 'node:fs';
import { cp, readFile } from 'node:fs/promises';
import { request, type IncomingHttpHeaders } from 'node:http';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { appFromCache, cachedInstall, compileApp } from './support/app-installs.js';
import { startServer, type RunResult, type Server } from './support/processes.js';

const APPS_DIR = fileURLToPath(new URL('./apps', import.meta.url));
/** The sources every app runs (apps/shared/README.md). */
const SHARED_DIR = join(APPS_DIR, 'shared');

const APPS = [
  { name: 'nest11-cjs', kind: 'CommonJS', nest: 11 },
  { name: 'nest12-cjs', kind: 'CommonJS', nest: 12 },
  { name: 'nest12-esm', kind: 'ESM', nest: 12 },
] as const;

/** The ioredis majors the package accepts, as each app installs them. */
const IOREDIS = { 5: '^5.4.0', 6: '^6.0.0' } as const;

export interface Cell {
  app: (typeof APPS)[number];
  ioredis: keyof typeof IOREDIS;
  /** `<app>-ioredis<major>`: the name of its install and of its folder in a run. */
  name: string;
  /** The order id its requests lock, one per cell. */
  order: number;
}

export const CELLS: Cell[] = APPS.flatMap((app, a) =>
  ([6, 5] as const).map((ioredis, i) => ({
    app,
    ioredis,
    name: `${app.name}-ioredis${ioredis}`,
    order: 100 + 10 * a + i,
  })),
);

/** How long an app may take to install (cold: from the registry) and compile. */
export const PREPARE_TIMEOUT_MS = 480_000;
export const INSTALL_TIMEOUT_MS = 240_000;
export const TSC_TIMEOUT_MS = 180_000;
const LINE_TIMEOUT_MS = 30_000;

interface PackageJson {
  version: string;
  dependencies: Record<string, string>;
}

const readJson = async <T>(path: string): Promise<T> =>
  JSON.parse(await readFile(path, 'utf8')) as T;

export interface PreparedApp {
  dir: string;
  typecheck: RunResult;
}

/**
 * Starts installing and compiling every cell under `work` (a few at a time,
 * support/app-installs.ts); the cell's tests await its promise.
 */
export function prepareMatrix(work: string, tarball: string): Map<string, Promise<PreparedApp>> {
  const prepared = new Map<string, Promise<PreparedApp>>();
  for (const app of APPS) {
    const fixture = join(APPS_DIR, app.name);
    const json = JSON.parse(readFileSync(join(fixture, 'package.json'), 'utf8')) as PackageJson;
    const cells = CELLS.filter((cell) => cell.app === app);
    // The fixture's package.json as written first; the other ioredis starts from a copy of its install.
    const own = cells.find((cell) => IOREDIS[cell.ioredis] === json.dependencies.ioredis);
    const ownInstall = cachedInstall(own?.name ?? app.name, json, INSTALL_TIMEOUT_MS);
    for (const cell of own ? [own, ...cells.filter((c) => c !== own)] : cells) {
      const base = cell === own ? undefined : own && prepared.get(own.name);
      const promise = (async () => {
        const dependencies = { ...json.dependencies, ioredis: IOREDIS[cell.ioredis] };
        const cache = base
          ? await cachedInstall(
              cell.name,
              { ...json, dependencies },
              INSTALL_TIMEOUT_MS,
              ownInstall,
            )
          : await ownInstall;
        const dir = join(work, cell.name);
        const sources = { dirs: [SHARED_DIR, fixture], outDir: 'dist' };
        await appFromCache(cache, dir, sources, tarball, INSTALL_TIMEOUT_MS);
        // No compile of its own kept yet: tsc starts from the other ioredis's (its build info
        // and output) and checks again what the swap changed, instead of every declaration.
        if (base && !existsSync(join(dir, 'dist'))) {
          const from = await base.catch(() => undefined);
          if (from?.typecheck.code === 0)
            await cp(join(from.dir, 'dist'), join(dir, 'dist'), { recursive: true });
        }
        const tsc = join(dir, 'node_modules/typescript/bin/tsc');
        return { dir, typecheck: await compileApp(cache, dir, tsc, 'dist', TSC_TIMEOUT_MS) };
      })();
      promise.catch(() => undefined); // reported by the cell's tests
      prepared.set(cell.name, promise);
    }
  }
  return prepared;
}

interface Reply {
  status: number;
  headers: IncomingHttpHeaders;
  body: Record<string, unknown>;
}

function post(port: number, path: string): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, method: 'POST', agent: false }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () => {
        try {
          resolve({ status: res.statusCode!, headers: res.headers, body: JSON.parse(text) });
        } catch {
          reject(new Error(`POST ${path} answered ${res.statusCode} with no JSON: ${text}`));
        }
      });
    });
    req.on('error', reject);
    req.end();
  });
}

/**
 * The matrix's tests: `context()` gives, once the outer beforeAll ran, the
 * prepared cells, the packed package's version and the redis-server to lock on.
 */
export function describeCompatMatrix(
  context: () => {
    prepared: Map<string, Promise<PreparedApp>>;
    version: string;
    redisUrl: string;
  },
): void {
  describe.each(CELLS)('$name', (cell) => {
    let app: PreparedApp;
    let server: Server | undefined;
    let port: number;

    beforeAll(async () => {
      app = await context().prepared.get(cell.name)!;
    }, PREPARE_TIMEOUT_MS);

    afterAll(async () => {
      await server?.stop();
    });

    it(`is ${cell.app.kind === 'ESM' ? 'an' : 'a'} ${cell.app.kind} app on Nest ${cell.app.nest} and ioredis ${cell.ioredis}, with the package installed from the tarball`, async () => {
      const modules = join(app.dir, 'node_modules');
      const version = async (name: string): Promise<string> =>
        (await readJson<PackageJson>(join(modules, name, 'package.json'))).version;
      expect(await version('nestjs-redis-lock')).toBe(context().version);
      expect(await version('@nestjs/core')).toMatch(new RegExp(`^${cell.app.nest}\\.`));
      expect(await version('@nestjs/common')).toMatch(new RegExp(`^${cell.app.nest}\\.`));
      expect(await version('ioredis')).toMatch(new RegExp(`^${cell.ioredis}\\.`));
      const own = await readJson<{ type?: string }>(join(app.dir, 'package.json'));
      expect(own.type).toBe(cell.app.kind === 'ESM' ? 'module' : undefined);
      // One ioredis and one Nest in the tree: the package uses the app's own.
      await expect(
        readFile(join(modules, 'nestjs-redis-lock/node_modules/ioredis/package.json')),
      ).rejects.toThrow();
    });

    it('type-checks against the installed declarations with its own tsc and tsconfig.json', () => {
      expect(app.typecheck.stdout + app.typecheck.stderr).toBe('');
      expect(app.typecheck.code).toBe(0);
    });

    it(`loads the package with ${cell.app.kind === 'ESM' ? 'import' : 'require()'}, as tsc compiled it`, async () => {
      const compiled = await readFile(join(app.dir, 'dist/app.module.js'), 'utf8');
      const loads =
        cell.app.kind === 'ESM'
          ? /^import .* from ["']nestjs-redis-lock["'];$/m
          : /\brequire\(["']nestjs-redis-lock["']\)/;
      expect(compiled).toMatch(loads);
    });

    it(
      'boots with plain node and listens',
      async () => {
        const main = join(app.dir, 'dist/main.js');
        server = startServer(process.execPath, [main], app.dir, { REDIS_URL: context().redisUrl });
        const ready = await server.line(/^ready (\d+)$/, LINE_TIMEOUT_MS);
        port = Number(ready[1]);
        expect(port).toBeGreaterThan(0);
      },
      LINE_TIMEOUT_MS + 5_000,
    );

    it('answers a second request on a held key 409 with Retry-After', async () => {
      const holder = post(port, `/orders/${cell.order}/pay?hold=1`);
      await server!.line(new RegExp(`^holding ${cell.order}$`), LINE_TIMEOUT_MS);
      const busy = await post(port, `/orders/${cell.order}/pay`);
      expect(busy.status).toBe(409);
      expect(busy.body).toMatchObject({ code: 'LOCK_BUSY' });
      expect(busy.headers['retry-after']).toMatch(/^[1-9]\d*$/);

      expect((await post(port, `/orders/${cell.order}/release`)).body).toEqual({ released: true });
      const held = await holder;
      expect(held.status).toBe(201);
      expect(held.body).toMatchObject({ id: cell.order, token: expect.any(Number) });
    });

    it('hands the handler its fencing token, which grows from one request to the next', async () => {
      const first = await post(port, `/orders/${cell.order}/pay`);
      const second = await post(port, `/orders/${cell.order}/pay`);
      expect([first.status, second.status]).toEqual([201, 201]);
      const token = (reply: Reply): number => reply.body.token as number;
      expect(Number.isSafeInteger(token(first))).toBe(true);
      expect(token(first)).toBeGreaterThan(0);
      expect(token(second)).toBeGreaterThan(token(first));
      // @FencingToken() and the injected LockContext agree.
      expect(first.body.contextToken).toBe(token(first));
      expect(second.body.contextToken).toBe(token(second));
    });
  });
}
