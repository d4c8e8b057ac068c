import 'reflect-metadata';
import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { Controller, Get, Module, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { HealthCheck, HealthCheckService } from '@nestjs/terminus';
import { LockService, RedisLockModule } from '../../lib/index.js';
import {
  RedisLockHealthIndicator,
  RedisLockHealthModule,
  type RedisLockHealthDetails,
} from '../../lib/health/index.js';
import { engineReady, nodesBack } from '../support/engine-ready.js';
import { quietLogger } from '../support/quiet-logger.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';

const redis = useRedisNodes(3);
const label = (i: number) => `127.0.0.1:${redis.nodes[i].port}`;

/** What a user writes: a terminus health controller with the lock nodes in it. */
@Controller('health')
class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly redisLock: RedisLockHealthIndicator,
  ) {}

  @Get()
  @HealthCheck()
  check() {
    return this.health.check([() => this.redisLock.isHealthy('locks')]);
  }
}

@Module({ imports: [RedisLockHealthModule], controllers: [HealthController] })
class HealthModule {}

@Module({
  imports: [
    RedisLockModule.forRootAsync({
      useFactory: () => ({ nodes: redis.nodes.map((n) => n.url), logger: quietLogger() }),
    }),
    HealthModule,
  ],
})
class AppModule {}

interface HealthBody {
  status: 'ok' | 'error';
  details: { locks: RedisLockHealthDetails & { status: 'up' | 'down' } };
}

const platforms = [
  ['Express', () => new ExpressAdapter()],
  ['Fastify', () => new FastifyAdapter()],
] as const;

describe.each(platforms)(
  'the /health endpoint with RedisLockHealthIndicator (%s)',
  (_, adapter) => {
    let app: INestApplication;
    let base: string;

    beforeAll(async () => {
      app = await NestFactory.create(AppModule, adapter(), { logger: false });
      await app.listen(0, '127.0.0.1');
      base = (await app.getUrl()).replace('[::1]', '127.0.0.1');
    });
    afterAll(() => app.close());
    afterEach(async () => {
      await nodesBack(redis.nodes, app.get(LockService));
    });

    async function health(): Promise<{ status: number; body: HealthBody }> {
      const response = await fetch(`${base}/health`);
      return { status: response.status, body: (await response.json()) as HealthBody };
    }

    it('answers 200 up with every node up and its latency, while all nodes answer', async () => {
      const { status, body } = await health();
      expect(status).toBe(200);
      expect(body.status).toBe('ok');
      expect(body.details.locks).toMatchObject({
        status: 'up',
        quorum: true,
        required: 2,
        reachable: 3,
      });
      expect(body.details.locks.nodes).toEqual(
        [0, 1, 2].map((i) => ({ node: label(i), status: 'up', latency: expect.any(Number) })),
      );
      for (const node of body.details.locks.nodes) expect(node.latency).toBeGreaterThanOrEqual(0);
    });

    it('stays up with one node of three down, reporting that node down', async () => {
      await redis.nodes[2].kill();
      const { status, body } = await health();
      expect(status).toBe(200);
      expect(body.details.locks).toMatchObject({ status: 'up', quorum: true, reachable: 2 });
      expect(body.details.locks.nodes[2]).toEqual({
        node: label(2),
        status: 'down',
        error: expect.any(String),
      });
    });

    it('answers 503 down once the quorum is lost (two nodes of three killed), and 200 up again once they are back', async () => {
      await Promise.all([redis.nodes[1].kill(), redis.nodes[2].kill()]);
      const down = await health();
      expect(down.status).toBe(503);
      expect(down.body.status).toBe('error');
      expect(down.body.details.locks).toMatchObject({
        status: 'down',
        quorum: false,
        required: 2,
        reachable: 1,
      });
      expect(down.body.details.locks.nodes.map((n) => n.status)).toEqual(['up', 'down', 'down']);

      await Promise.all([redis.nodes[1].restart(), redis.nodes[2].restart()]);
      await engineReady(app.get(LockService));
      const up = await health();
      expect(up.status).toBe(200);
      expect(up.body.details.locks).toMatchObject({ status: 'up', quorum: true, reachable: 3 });
    });
  },
);
