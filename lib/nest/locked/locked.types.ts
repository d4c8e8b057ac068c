import type { Observable } from 'rxjs';

// The signature of @Locked(): what it may decorate, said by the compiler. A method that
// breaks a rule gets a compile error naming the rule's interface below, whose one property
// says what to change.

/**
 * What a `@Locked()` method may return: a Promise (write the method `async`),
 * an Observable (the lock lasts until the stream ends), or, for a GraphQL
 * `@Subscription()` resolver, the AsyncIterable it subscribes to (the lock
 * lasts until the iteration ends; on any other method, until the method has
 * returned it). A synchronous method could not keep its signature: once
 * locked, it returns a Promise of its result.
 */
export type LockedResult = PromiseLike<unknown> | Observable<unknown> | AsyncIterable<unknown>;

/** `@Locked()` goes on a method whose result is a {@link LockedResult}. */
export interface LockedMethodMustReturnAPromiseOrAnObservable {
  /** The rule, as the compiler's error shows it. */
  readonly '@Locked() needs a method that returns a Promise or an Observable: make it async': never;
}

/** A key function of `@Locked()` takes the method's arguments, so it must accept their types. */
export interface LockKeyFunctionMustAcceptTheMethodArguments {
  /** The rule, as the compiler's error shows it. */
  readonly "@Locked() calls its key function with the method's arguments: declare its parameters as the method's, or wider": never;
}

/** `@Locked()` goes on methods only. */
export interface LockedGoesOnMethodsOnly {
  /** The rule, as the compiler's error shows it. */
  readonly '@Locked() goes on methods only': never;
}

/**
 * `unknown` when `@Locked()` with a key function of parameters `KeyArgs` may
 * decorate a method of type `Method`; otherwise the interface that names the
 * broken rule, so that the decorator's application fails to compile. A
 * descriptor typed `any` (one read with `Object.getOwnPropertyDescriptor`)
 * says nothing, and passes.
 */
export type LockableMethod<Method, KeyArgs extends unknown[]> = 0 extends 1 & Method
  ? unknown
  : Method extends (...args: infer Params) => infer Result
    ? [Result] extends [LockedResult]
      ? ((...args: KeyArgs) => unknown) extends (...args: Params) => unknown
        ? unknown
        : LockKeyFunctionMustAcceptTheMethodArguments
      : LockedMethodMustReturnAPromiseOrAnObservable
    : LockedGoesOnMethodsOnly;

/**
 * What `@Locked()` returns: a method decorator that compiles only on a method
 * that returns a {@link LockedResult} and whose parameters fit the key
 * function's (`KeyArgs`; any arguments for a template).
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- by default, any method's arguments
export type LockedDecorator<KeyArgs extends unknown[] = any[]> = <Method>(
  target: object,
  propertyKey: string | symbol,
  descriptor: TypedPropertyDescriptor<Method> & LockableMethod<Method, KeyArgs>,
) => TypedPropertyDescriptor<Method>;
