/**
 * A Nest app in its own process, for the graceful-shutdown test
 * (test/nest/graceful-shutdown.e2e-spec.ts): one locked route whose work
 * takes as long as asked, with shutdown hooks on.
 *
 * ```sh
 * node --import tsx test/support/shutdown-app.ts \
 *   --nodes redis://127.0.0.1:7001,redis://127.0.0.1:7002 --shutdown-timeout 5000
 * ```
 *
 * One JSON object per line on stdout, each stamped `at` with the system-wide
 * monotonic clock (ms), so the test can order them against its own events:
 * `listening` (with the port), `started` and `finished` (or `aborted`) for
 * the locked work, `released` (what the release found), and how the nodes
 * answered the lock's attempts, grant and renewals (`contended`, `acquired`,
 * `extended`, `lost`).
 */
import 'reflect-metadata';
import { Controller, Module, Post, Query } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { parseArgs } from 'node:util';
import { Locked, LockService, LockSignal, RedisLockModule } from '../../lib/index.js';
import { engineReady } from './engine-ready.js';
import { machineNow as now } from './machine-clock.js';

const { values } = parseArgs({
  options: {
    nodes: { type: 'string' },
    'shutdown-timeout': { type: 'string' },
  },
});

const say = (event: Record<string, unknown>) =>
  process.stdout.write(`${JSON.stringify({ ...event, at: now() })}\n`);

@Controller()
class WorkController {
  @Post('work')
  @Locked('shutdown:work')
  async work(@Query('ms') ms: string, @LockSignal() signal: AbortSignal): Promise<string> {
    say({ event: 'started' });
    // Work that stops when its lock is lost, as docs/configuration.md asks of a long routine.
    const done = await new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(true), Number(ms));
      signal.addEventListener('abort', () => {
        clearTimeout(timer);
        resolve(false);
      });
    });
    say({ event: done ? 'finished' : 'aborted' });
    return done ? 'done' : 'stopped';
  }
}

@Module({
  imports: [
    RedisLockModule.forRoot({
      nodes: values.nodes!.split(','),
      shutdownTimeout: Number(values['shutdown-timeout']),
      // A lease that a stall of the loaded test machine cannot outlast between two extensions:
      // with 1 s, a clean-clone CI run once found the key expired on one node by the release.
      ttl: 3000,
      // Not the 300 ms a 3 s lease would get by default: the test counts the nodes the release
      // reached, and a node's fsync under the suite's load can take longer than that (400 ms
      // once did not suffice in a local run beside property tests).
      nodeTimeout: 1000,
      logging: false,
    }),
  ],
  controllers: [WorkController],
})
class ShutdownAppModule {}

const app = await NestFactory.create(ShutdownAppModule, { logger: false });
app.enableShutdownHooks();
const locks = app.get(LockService);
locks.on('released', ({ result }) => say({ event: 'released', result }));
// How each node answered the lock's grant and renewals: a release that finds a node without the
// lock shows, with these, whether that node ever granted it.
locks.on('contended', ({ nodes }) => say({ event: 'contended', nodes }));
locks.on('acquired', ({ nodes, attempts }) => say({ event: 'acquired', nodes, attempts }));
locks.on('extended', ({ nodes }) => say({ event: 'extended', nodes }));
locks.on('lost', ({ error }) => say({ event: 'lost', reason: error.message }));
await app.listen(0, '127.0.0.1');
// The test counts the nodes a release reached. connect() stops waiting after 2 s and leaves the
// clients connecting: on the loaded test machine a lock could then be granted by two nodes while
// the third was still connecting, and its release would reach two.
await engineReady(locks);
const address = app.getHttpServer().address() as { port: number };
say({ event: 'listening', port: address.port });
