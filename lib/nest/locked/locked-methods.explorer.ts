import {
  Inject,
  Injectable,
  Logger,
  type OnApplicationShutdown,
  type OnModuleInit,
} from '@nestjs/common';
import { DiscoveryService, MetadataScanner } from '@nestjs/core';
import type { InstanceWrapper } from '@nestjs/core/injector/instance-wrapper.js';
import { LockService } from '../module/lock.service.js';
import { REDIS_LOCK_MODULE_OPTIONS } from '../module/redis-lock.module-definition.js';
import type { RedisLockModuleOptions } from '../module/redis-lock.options.js';
import { LOCKED_METADATA, LOCKED_RUNTIME, type LockedRuntime } from './locked.metadata.js';
import { checkLockedOptions } from './locked.options.js';

/**
 * The applications whose set-up a shared prototype carries, latest last: when
 * one of two live applications closes, the other's request-scoped and
 * transient instances must keep theirs.
 */
const prototypeOwners = new WeakMap<object, LockedRuntime[]>();

/**
 * Finds the controllers and providers with `@Locked()` methods and gives them
 * this application's LockService. Singleton instances get it on themselves, so
 * an object of the same class made with `new` stays unset and fails closed.
 * Request-scoped and transient instances, which Nest makes later (per request,
 * per consumer), find it on their class's prototype.
 */
@Injectable()
export class LockedMethodsExplorer implements OnModuleInit, OnApplicationShutdown {
  private readonly runtime: LockedRuntime;
  private readonly instances: object[] = [];
  private readonly prototypes: object[] = [];
  private readonly logger = new Logger('RedisLock');

  // Every dependency is named: the package must not rely on the compiler that builds the app
  // (or runs it, as tsx and esbuild do) emitting decorator metadata.
  constructor(
    @Inject(DiscoveryService) private readonly discovery: DiscoveryService,
    @Inject(MetadataScanner) private readonly scanner: MetadataScanner,
    @Inject(LockService) service: LockService,
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
    const locked = new Map<object, boolean>();
    const prototypes = new Set<object>();
    for (const wrapper of [...this.discovery.getControllers(), ...this.discovery.getProviders()]) {
      const prototype = this.prototypeOf(wrapper);
      if (!prototype) continue;
      if (!locked.has(prototype)) locked.set(prototype, this.hasLockedMethods(prototype));
      if (!locked.get(prototype)) continue;
      // One class can back several singletons (provided in two modules, or under two tokens).
      const { instance } = wrapper;
      if (
        wrapper.isDependencyTreeStatic() &&
        !wrapper.isTransient &&
        instance &&
        typeof instance === 'object'
      ) {
        setRuntime(instance, this.runtime);
        this.instances.push(instance);
      } else if (!prototypes.has(prototype)) {
        prototypes.add(prototype);
        const owners = prototypeOwners.get(prototype) ?? [];
        prototypeOwners.set(prototype, [...owners, this.runtime]);
        setRuntime(prototype, this.runtime);
        this.prototypes.push(prototype);
        this.logger.debug?.(
          `${wrapper.name as string} is request-scoped or transient: its @Locked() methods use the class's set-up.`,
        );
      }
    }
  }

  onApplicationShutdown(): void {
    for (const instance of this.instances) {
      if ((instance as Record<symbol, unknown>)[LOCKED_RUNTIME] === this.runtime) {
        setRuntime(instance, undefined);
      }
    }
    for (const prototype of this.prototypes) {
      const owners = (prototypeOwners.get(prototype) ?? []).filter((r) => r !== this.runtime);
      prototypeOwners.set(prototype, owners);
      setRuntime(prototype, owners.at(-1));
    }
    this.instances.length = 0;
    this.prototypes.length = 0;
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

function setRuntime(target: object, runtime: LockedRuntime | undefined): void {
  if (runtime) {
    Object.defineProperty(target, LOCKED_RUNTIME, {
      value: runtime,
      configurable: true,
      writable: true,
    });
  } else {
    delete (target as Record<symbol, unknown>)[LOCKED_RUNTIME];
  }
}
