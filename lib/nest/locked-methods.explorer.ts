import {
  Inject,
  Injectable,
  Logger,
  type OnApplicationShutdown,
  type OnModuleInit,
} from '@nestjs/common';
import { DiscoveryService, MetadataScanner } from '@nestjs/core';
import type { InstanceWrapper } from '@nestjs/core/injector/instance-wrapper.js';
import { LockService } from './lock.service.js';
import { LOCKED_METADATA, LOCKED_RUNTIME, type LockedRuntime } from './locked.decorator.js';
import { checkLockedOptions } from './locked-options.js';
import { REDIS_LOCK_MODULE_OPTIONS } from './redis-lock.module-definition.js';
import type { RedisLockModuleOptions } from './redis-lock-module-options.interface.js';

/**
 * Finds the controllers and providers with `@Locked()` methods and gives them
 * this application's LockService. Static instances get it on themselves;
 * their classes' prototypes get it too, for request-scoped and transient
 * instances that Nest creates later.
 */
@Injectable()
export class LockedMethodsExplorer implements OnModuleInit, OnApplicationShutdown {
  private readonly runtime: LockedRuntime;
  private readonly installed: object[] = [];
  private readonly logger = new Logger('RedisLock');

  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    service: LockService,
    @Inject(REDIS_LOCK_MODULE_OPTIONS) options: RedisLockModuleOptions,
  ) {
    this.runtime = Object.freeze({
      engine: service,
      defaults: Object.freeze(
        checkLockedOptions('RedisLockModule locked defaults', options.locked, false),
      ),
    });
  }

  onModuleInit(): void {
    const seen = new Set<object>();
    for (const wrapper of [...this.discovery.getControllers(), ...this.discovery.getProviders()]) {
      const prototype = this.prototypeOf(wrapper);
      if (!prototype || seen.has(prototype) || !this.hasLockedMethods(prototype)) continue;
      seen.add(prototype);
      this.install(prototype);
      const { instance } = wrapper;
      if (wrapper.isDependencyTreeStatic() && instance && typeof instance === 'object')
        this.install(instance);
      else
        this.logger.debug?.(
          `${wrapper.name as string} is request-scoped or transient: its @Locked() methods use the class's set-up.`,
        );
    }
  }

  onApplicationShutdown(): void {
    for (const target of this.installed) {
      if ((target as Record<symbol, unknown>)[LOCKED_RUNTIME] === this.runtime) {
        delete (target as Record<symbol, unknown>)[LOCKED_RUNTIME];
      }
    }
    this.installed.length = 0;
  }

  private install(target: object): void {
    Object.defineProperty(target, LOCKED_RUNTIME, {
      value: this.runtime,
      configurable: true,
      writable: true,
    });
    this.installed.push(target);
  }

  private prototypeOf(wrapper: InstanceWrapper): object | undefined {
    const { instance, metatype, inject } = wrapper;
    if (instance && typeof instance === 'object') return Object.getPrototypeOf(instance) as object;
    // Not instantiated yet (request-scoped or transient): a class provider's prototype.
    return typeof metatype === 'function' && !inject ? (metatype.prototype as object) : undefined;
  }

  private hasLockedMethods(prototype: object): boolean {
    return this.scanner
      .getAllMethodNames(prototype)
      .some((name) =>
        Reflect.hasMetadata(LOCKED_METADATA, (prototype as Record<string, object>)[name]),
      );
  }
}
