/**
 * What `@Locked()` accepts at compile time. Never run: `npm run typecheck`
 * compiles it, and fails when a line marked `@ts-expect-error` compiles (a
 * rule got lost) or an unmarked line does not (a rule refuses what it should
 * accept).
 */
import { applyDecorators, Body, Controller, Get, Param, Post } from '@nestjs/common';
import { Observable, of } from 'rxjs';
import {
  CurrentLock,
  FencingToken,
  isLockFailure,
  lockFailureBody,
  Limited,
  Locked,
  LockSignal,
  type Lock,
  type LockableMethod,
  type LockError,
  type LockFailureBody,
  type LockedDecorator,
  type LockedGoesOnMethodsOnly,
  type LockedMethodMustReturnAPromiseOrAnObservable,
  type LockKey,
  type LockKeyFunction,
  type LockKeyFunctionMustAcceptTheMethodArguments,
} from '../../lib/index.js';

/** Compiles only when `A` and `B` are the same type. */
type Equal<A, B> =
  (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
function expectType<T extends true>(): T | undefined {
  return undefined;
}

interface Order {
  id: number;
  customer: { id: string };
}
interface PaidOrder extends Order {
  paidAt: Date;
}

// --- What a locked method may return ------------------------------------------------------

export class Results {
  @Locked('order:<0>')
  async pay(id: number): Promise<number> {
    return id;
  }

  @Locked('order:<0>')
  payLater(id: number): Promise<number> {
    return Promise.resolve(id);
  }

  @Locked('feed:<0>')
  watch(id: string): Observable<string> {
    return of(id);
  }

  // A GraphQL @Subscription() resolver returns what it subscribes to; the lock lasts as long.
  @Locked('feed:<0>')
  receipts(id: string): AsyncIterable<string> {
    return (async function* () {
      yield id;
    })();
  }

  @Locked('order:<0>')
  refuse(id: string): never {
    throw new Error(`order ${id} cannot be refunded`);
  }

  // @ts-expect-error -- LockedMethodMustReturnAPromiseOrAnObservable: the locked method returns a Promise
  @Locked('order:<0>')
  double(n: number): number {
    return n * 2;
  }

  // @ts-expect-error -- LockedMethodMustReturnAPromiseOrAnObservable
  @Locked('job')
  run(): void {}

  // @ts-expect-error -- LockedMethodMustReturnAPromiseOrAnObservable: a value or a Promise of it
  @Locked('order:<0>')
  maybe(id: number): number | Promise<number> {
    return id > 0 ? id : Promise.resolve(id);
  }

  // @ts-expect-error -- LockedMethodMustReturnAPromiseOrAnObservable: unknown may be anything
  @Locked('job')
  unknownResult(): unknown {
    return undefined;
  }
}

// --- Key functions typed from the method's parameters ---------------------------------------

export class Keys {
  @Locked((order: Order) => `order:${order.id}`)
  async pay(order: Order, @FencingToken() token?: number): Promise<number | undefined> {
    return token;
  }

  // A key function may take a wider type than the method: it is called with what the method gets.
  @Locked((order: Order) => `order:${order.id}`)
  async refund(order: PaidOrder): Promise<Date> {
    return order.paidAt;
  }

  @Locked((order: Order, note: string) => [`order:${order.id}`, `note:${note}`])
  async annotate(order: Order, note: string, @CurrentLock() lock?: Lock): Promise<void> {
    void [order, note, lock];
  }

  // Fewer parameters than the method: the others are not part of the key.
  @Locked((order: Order) => `customer:${order.customer.id}`)
  async move(order: Order, to: string, @LockSignal() signal?: AbortSignal): Promise<void> {
    void [order, to, signal];
  }

  // Unannotated parameters take the method's arguments as `any`, as before.
  @Locked((order) => `order:${order.id}`)
  async cancel(order: Order): Promise<void> {
    void order;
  }

  // @ts-expect-error -- LockKeyFunctionMustAcceptTheMethodArguments: the method takes an id, not an Order
  @Locked((order: Order) => `order:${order.id}`)
  async payById(id: number): Promise<number> {
    return id;
  }

  // @ts-expect-error -- LockKeyFunctionMustAcceptTheMethodArguments: not every Order is paid
  @Locked((order: PaidOrder) => `order:${order.id}`)
  async settle(order: Order): Promise<number> {
    return order.id;
  }

  // @ts-expect-error -- LockKeyFunctionMustAcceptTheMethodArguments: the method has no second argument
  @Locked((order: Order, note: string) => `order:${order.id}:${note}`)
  async archive(order: Order): Promise<number> {
    return order.id;
  }

  // @ts-expect-error -- a key function returns a string or an array of strings
  @Locked((order: Order) => order.id)
  async count(order: Order): Promise<number> {
    return order.id;
  }
}

// --- On controllers, with Nest's parameter decorators -------------------------------------

@Controller('orders')
export class OrdersController {
  @Post(':id/pay')
  @Locked('order:<0>', { wait: false })
  async pay(@Param('id') id: string, @FencingToken() token: number): Promise<string> {
    return `${id}:${token}`;
  }

  @Post()
  @Locked((order: Order) => `order:${order.id}`)
  async create(@Body() order: Order): Promise<Order> {
    return order;
  }

  @Get(':id')
  // @ts-expect-error -- LockedMethodMustReturnAPromiseOrAnObservable
  @Locked('order:<0>')
  find(@Param('id') id: string): string {
    return id;
  }
}

// --- Modes and permits: the same rules ----------------------------------------------------

export class Modes {
  @Locked('catalogue:<0>', { mode: 'read' })
  async read(id: number): Promise<number> {
    return id;
  }

  @Locked((id: number) => `catalogue:${id}`, { mode: 'write', wait: false })
  write(id: number): Observable<number> {
    return of(id);
  }

  // @ts-expect-error -- a mode is 'read' or 'write'
  @Locked('catalogue:<0>', { mode: 'exclusive' })
  async other(id: number) {
    return id;
  }

  @Limited('exports:<0>', { permits: 2, wait: false, ttl: 2000 })
  async export(tenant: string) {
    return tenant;
  }

  @Limited((order: Order) => `charges:${order.customer.id}`, { permits: 4 })
  async charge(order: Order) {
    return order.id;
  }

  // @ts-expect-error -- LockedMethodMustReturnAPromiseOrAnObservable, for @Limited() too
  @Limited('exports:<0>', { permits: 2 })
  exportNow(tenant: string) {
    return tenant;
  }

  // @ts-expect-error -- LockKeyFunctionMustAcceptTheMethodArguments, for @Limited() too
  @Limited((order: Order) => `charges:${order.id}`, { permits: 2 })
  async chargeById(id: number) {
    return id;
  }

  // @ts-expect-error -- @Limited() needs its permits
  @Limited('exports', {})
  async exportAll() {
    return 0;
  }

  // @ts-expect-error -- @Limited() takes no mode
  @Limited('exports', { permits: 2, mode: 'read' })
  async exportRead() {
    return 0;
  }
}

// --- Elsewhere than on a method -----------------------------------------------------------

export class Elsewhere {
  // @ts-expect-error -- a property is no method
  @Locked('name')
  name = 'x';

  // @ts-expect-error -- LockedGoesOnMethodsOnly
  @Locked('label')
  get label(): string {
    return this.name;
  }
}

// --- The types themselves -----------------------------------------------------------------

expectType<Equal<LockableMethod<(id: number) => Promise<number>, unknown[]>, unknown>>();
expectType<
  Equal<
    LockableMethod<(id: number) => number, unknown[]>,
    LockedMethodMustReturnAPromiseOrAnObservable
  >
>();
expectType<
  Equal<
    LockableMethod<(id: number) => Promise<number>, [order: Order]>,
    LockKeyFunctionMustAcceptTheMethodArguments
  >
>();
expectType<Equal<LockableMethod<string, unknown[]>, LockedGoesOnMethodsOnly>>();
// A descriptor typed `any` (from Object.getOwnPropertyDescriptor) says nothing, and passes.
expectType<Equal<LockableMethod<any, [order: Order]>, unknown>>(); // eslint-disable-line @typescript-eslint/no-explicit-any

// The key function's parameters become the decorator's.
const _byOrder = Locked((order: Order) => `order:${order.id}`);
expectType<Equal<typeof _byOrder, LockedDecorator<[order: Order]>>>();
// A key function types its parameters from the arguments it names.
const keyFunction: LockKeyFunction<[Order]> = (order) => `order:${order.customer.id}`;
export const typedKey: LockKey<[Order]> = keyFunction;

// The untyped LockKey and LockKeyFunction of before still name any key.
const anyKey: LockKey = (a: number, b: string) => `${a}:${b}`;
const anyFunction: LockKeyFunction = anyKey as LockKeyFunction;
void anyFunction;

// Composed with applyDecorators (which takes Nest's untyped MethodDecorator), through a cast.
export const LockedPayment = (): MethodDecorator =>
  applyDecorators(Post(':id/pay'), Locked('order:<0>') as MethodDecorator);

// --- Answering lock failures by hand -----------------------------------------------------

// A caught error is unknown: isLockFailure() narrows it, and lockFailureBody() takes it as is.
export function answerOf(caught: unknown): LockFailureBody | undefined {
  if (isLockFailure(caught)) {
    expectType<Equal<typeof caught, LockError>>();
    return lockFailureBody(caught);
  }
  return lockFailureBody(caught);
}
