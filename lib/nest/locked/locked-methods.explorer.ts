import {
  Inject,
  Injectable,
  Logger,
  type OnApplicationShutdown,
  type OnModuleInit,
} from '@nestjs/common';
import { DiscoveryService, MetadataScanner } from '@nestjs/core';
import type { InstanceWrapper } from '@nestjs/core/injector/instance-wrapper.js';
import { LockOptionsError } from '../../engine/index.js';
import { LockService } from '../module/lock.service.js';
import { REDIS_LOCK_MODULE_OPTIONS } from '../module/redis-lock.module-definition.js';
import type { RedisLockModuleOptions } from '../module/redis-lock.options.js';
import {
  LOCK_PARAMS_METADATA,
  LOCKED_METADATA,
  LOCKED_RUNTIME,
  type LockedRuntime,
  type LockParam,
} from './locked.metadata.js';
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
    @Inject(LockService) private readonly service: LockService,
    @Inject(REDIS_LOCK_MODULE_OPTIONS) options: RedisLockModuleOptions,
  ) {
    this.runtime = Object.freeze({
      engine: service,
      defaults: Object.freeze(
        checkLockedOptions('RedisLockModule locked defaults', options.locked, false),
      ),
    });
  }

  async onModuleInit(): Promise<void> {
    try {
      this.setUpLockedClasses();
    } catch (error) {
      // A class that cannot start: the application fails, and its connections must not outlive it.
      // (A stand-in put in LockService's place may close differently, or not at all.)
      const service = this.service as Partial<LockService>;
      await Promise.resolve(service.close?.({ timeout: 0 })).catch(() => undefined);
      throw error;
    }
  }

  private setUpLockedClasses(): void {
    const locked = new Map<object, boolean>();
    const prototypes = new Set<object>();
    for (const wrapper of [...this.discovery.getControllers(), ...this.discovery.getProviders()]) {
      const prototype = this.prototypeOf(wrapper);
      if (!prototype) continue;
      if (!locked.has(prototype)) {
        const className = (prototype.constructor as { name?: string } | undefined)?.name;
        locked.set(prototype, this.hasLockedMethods(prototype, className || String(wrapper.name)));
      }
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

  /**
   * Whether any method of the class is locked. Throws for a method with a lock
   * parameter (`@FencingToken()`, say) but no `@Locked()` or `@Limited()`: it
   * would run unlocked, with nothing in that parameter.
   */
  private hasLockedMethods(prototype: object, className: string): boolean {
    let found = false;
    for (const name of this.scanner.getAllMethodNames(prototype)) {
      if (Reflect.hasMetadata(LOCKED_METADATA, (prototype as Record<string, object>)[name])) {
        found = true;
        continue;
      }
      // The class that defines the method: an override may leave the locking to super's.
      let owner: object | null = prototype;
      while (owner && !Object.hasOwn(owner, name)) owner = Object.getPrototypeOf(owner) as object;
      const params = (owner && Reflect.getOwnMetadata(LOCK_PARAMS_METADATA, owner, name)) as
        readonly LockParam[] | undefined;
      if (params?.length) {
        const { decorator, index } = params[0];
        throw new LockOptionsError(
          `${className}.${name}() has @${decorator}() on its parameter ${index}, which is filled from the method's lock, ` +
            `but the method has no @Locked() (or @Limited()), so it would run unlocked. Add @Locked('<key>') to the method, ` +
            `or drop @${decorator}().`,
        );
      }
    }
    return found;
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
