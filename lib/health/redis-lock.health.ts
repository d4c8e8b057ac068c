import { Injectable } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { HealthIndicatorService, type HealthIndicatorResult } from '@nestjs/terminus';
import { LockOptionsError, type LockEngine } from '../engine/index.js';
import { LockService } from '../nest/index.js';

/** One node in a health result. */
export interface RedisLockNodeStatus {
  /** `host:port`, without credentials. */
  readonly node: string;
  readonly status: 'up' | 'down';
  /** PING round trip in ms, when up. */
  readonly latency?: number;
  /** Why the node is down. */
  readonly error?: string;
}

/**
 * The data of a `RedisLockHealthIndicator` result, next to its `status`.
 * (A type alias, not an interface: terminus wants a plain record.)
 */
export type RedisLockHealthDetails = {
  /** True while at least `required` nodes answer: locks can be granted. */
  readonly quorum: boolean;
  /** Nodes that must answer for a lock: floor(n / 2) + 1. */
  readonly required: number;
  /** Nodes that answered. */
  readonly reachable: number;
  readonly nodes: readonly RedisLockNodeStatus[];
};

/**
 * A `@nestjs/terminus` health indicator for the lock nodes: pings every node
 * and reports each one up or down with its latency. The indicator is `up`
 * while a quorum of nodes answers (locks can be granted, even with a node
 * down) and `down` without one, which makes the health check answer 503.
 *
 * Provided by {@link RedisLockHealthModule}; checks the application's
 * `LockService` unless given another engine.
 *
 * @example
 * @Get('health')
 * @HealthCheck()
 * check() {
 *   return this.health.check([() => this.redisLock.isHealthy('locks')]);
 * }
 */
@Injectable()
export class RedisLockHealthIndicator {
  private locks: LockEngine | undefined;

  constructor(
    protected readonly indicators: HealthIndicatorService,
    protected readonly moduleRef: ModuleRef,
  ) {}

  /**
   * @param key The key of the result in the health check's details. Default `'redis-lock'`.
   * @param engine The engine to check. Default: the application's `LockService`.
   */
  async isHealthy<const Key extends string = 'redis-lock'>(
    key: Key = 'redis-lock' as Key,
    engine: LockEngine = this.lockService(),
  ): Promise<HealthIndicatorResult<Key, 'up' | 'down', RedisLockHealthDetails>> {
    const check = this.indicators.check(key);
    const health = await engine.health();
    const nodes = health.nodes.map((n): RedisLockNodeStatus =>
      n.up
        ? { node: n.node, status: 'up', latency: Math.round((n.latency ?? 0) * 100) / 100 }
        : { node: n.node, status: 'down', error: n.error },
    );
    const details: RedisLockHealthDetails = {
      quorum: health.quorum,
      required: health.required,
      reachable: health.nodes.filter((n) => n.up).length,
      nodes,
    };
    return health.quorum ? check.up(details) : check.down(details);
  }

  /** The application's LockService, wherever RedisLockModule was imported. */
  protected lockService(): LockEngine {
    if (this.locks) return this.locks;
    try {
      const locks = this.moduleRef.get(LockService, { strict: false });
      this.locks = locks;
      return locks;
    } catch {
      throw new LockOptionsError(
        'RedisLockHealthIndicator found no LockService: import RedisLockModule.forRoot() (or forRootAsync()) in the application, or pass the engine to check to isHealthy().',
      );
    }
  }
}
