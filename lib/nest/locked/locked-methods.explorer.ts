import {
  Inject,
  Injectable,
  Logger,
  type OnApplicationShutdown,
  type OnModuleInit,
} from '@nestjs/common';
import { DiscoveryService, MetadataScanner } from '@nestjs/core';
import type { InstanceWrapper } from '@nestjs/core/injector/instance-wrapper.js';
import type { Module } from '@nestjs/core/injector/module.js';
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
  /** Every registration of the module in this application, this one included. */
  private registrations: LockedMethodsExplorer[] = [this];

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
      // A class that cannot start: the application fails, and its connections (those of every
      // registration) must not outlive it.
      await Promise.all(this.registrations.map((explorer) => explorer.closeService()));
      throw error;
    }
  }

  private async closeService(): Promise<void> {
    // A stand-in put in LockService's place may close differently, or not at all.
    const service = this.service as Partial<LockService>;
    await Promise.resolve(service.close?.({ timeout: 0 })).catch(() => undefined);
  }

  private setUpLockedClasses(): void {
    const locked = new Map<object, boolean>();
    const prototypes = new Set<object>();
    const providers = this.discovery.getProviders();
    const registrations = providers.filter((w) => w.instance instanceof LockedMethodsExplorer);
    this.registrations = registrations.map((w) => w.instance as LockedMethodsExplorer);
    for (const wrapper of [...this.discovery.getControllers(), ...providers]) {
      const prototype = this.prototypeOf(wrapper);
      if (!prototype) continue;
      if (!locked.has(prototype)) {
        const className = (prototype.constructor as { name?: string } | undefined)?.name;
        locked.set(prototype, this.hasLockedMethods(prototype, className || String(wrapper.name)));
      }
      if (!locked.get(prototype)) continue;
      if (registrations.length > 1 && !this.isMine(wrapper, registrations)) continue;
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

  /**
   * With several registrations of the module in one application, which one a
   * class's `@Locked()` methods lock with: the one its own module can inject
   * (imported there or re-exported by an imported module; failing that, the
   * global one), as its LockService would be. A class that sees none or
   * several of them fails the start: locking through whichever registration
   * came last would let two instances hold "the same" lock on different nodes.
   */
  private isMine(wrapper: InstanceWrapper, registrations: readonly InstanceWrapper[]): boolean {
    const host = wrapper.host;
    // A registration imported into the module is the one Nest injects there, ahead of a global one.
    const imported = registrations.filter(
      (r) => r.host && !r.host.isGlobal && host && canInject(host, r.host),
    );
    const seen = imported.length > 0 ? imported : registrations.filter((r) => r.host?.isGlobal);
    if (seen.length === 1) return seen[0].instance === this;
    const list = registrations
      .map((r) => (r.instance as LockedMethodsExplorer).describeNodes())
      .join('; ');
    const where = `${String(wrapper.name)} (in ${host?.metatype?.name ?? 'an unknown module'})`;
    throw new LockOptionsError(
      `RedisLockModule is registered ${registrations.length} times in this application (${list}), and ${where} has ` +
        `@Locked() methods but its module can inject ${seen.length === 0 ? 'none' : 'several'} of them, so it is not ` +
        'clear which nodes its locks belong on. Import exactly one registration into that module (or re-export it ' +
        'from a shared module), or register the module once, with isGlobal: true.',
    );
  }

  /** This registration's nodes, for the messages above. */
  private describeNodes(): string {
    const nodes = (this.service as Partial<LockService>).nodes;
    return nodes ? `nodes ${nodes.map((node) => node.label).join(', ')}` : 'a stand-in LockService';
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

/**
 * Whether a provider of `host` can inject what `registration` exports, as
 * Nest resolves it: in the module itself, an imported one, or one that an
 * imported module re-exports (at any depth).
 */
function canInject(host: Module, registration: Module): boolean {
  if (host === registration) return true;
  const seen = new Set<Module>();
  const reExports = (module: Module): boolean => {
    if (seen.has(module)) return false;
    seen.add(module);
    for (const inner of module.imports) {
      if (!inner?.metatype || !module.exports.has(inner.metatype)) continue;
      if (inner === registration || reExports(inner)) return true;
    }
    return false;
  };
  for (const imported of host.imports) {
    if (imported === registration || (imported && reExports(imported))) return true;
  }
  return false;
}
