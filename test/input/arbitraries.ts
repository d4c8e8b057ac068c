/**
 * fast-check generators of option values, shared by the bad-input suites:
 * valid values, and wrong ones tagged with the option name their error
 * message must give.
 */
import fc from 'fast-check';

/** The longest delay Node timers honour (setTimeout clamps longer ones to 1 ms). */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** Anything that is not a number (null and undefined aside: they mean "the default"). */
export const notANumber: fc.Arbitrary<unknown> = fc.oneof(
  fc.string(),
  fc.boolean(),
  fc.bigInt(),
  fc.object({ maxDepth: 1 }),
  fc.array(fc.integer(), { maxLength: 3 }),
  fc.constant(Symbol('ms')),
  fc.constant(() => 5000),
  fc.constant(new Date(5000)),
);

const fraction = fc
  .double({ noNaN: true, noDefaultInfinity: true })
  .filter((n) => !Number.isInteger(n));

/** Not a whole number of milliseconds from `min` (to Number.MAX_SAFE_INTEGER). */
export const badMs = (min: number): fc.Arbitrary<unknown> =>
  fc.oneof(
    notANumber,
    fc.constantFrom(NaN, Infinity, -Infinity),
    fraction,
    fc.constantFrom(2 ** 53, 1e21, Number.MAX_VALUE),
    fc.integer({ min: Number.MIN_SAFE_INTEGER, max: min - 1 }),
  );

/** Not a number from `min` to `max`. */
export const badNumber = (min: number, max: number): fc.Arbitrary<unknown> =>
  fc.oneof(
    notANumber,
    fc.constant(NaN),
    // -0 is not below 0.
    fc.double({ min: -1e9, max: min, noNaN: true, maxExcluded: true }).filter((n) => n < min),
    fc.double({ min: max, max: 1e9, noNaN: true, minExcluded: true }),
  );

export const notABoolean: fc.Arbitrary<unknown> = fc.oneof(
  fc.string(),
  fc.integer(),
  fc.object({ maxDepth: 1 }),
  fc.constant(Symbol('flag')),
);

/** Retry options that are fine together (maxDelay never below delay). */
export const validRetry = (maxDelay = 60_000) =>
  fc
    .record(
      {
        attempts: fc.oneof(fc.nat(), fc.constant(Infinity)),
        factor: fc.double({ min: 1, max: 100, noNaN: true }),
        jitter: fc.double({ min: 0, max: 1, noNaN: true }),
        bounds: fc.integer({ min: 0, max: maxDelay }).chain((delay) =>
          fc.record({
            delay: fc.constant(delay),
            maxDelay: fc.integer({ min: delay, max: maxDelay }),
          }),
        ),
      },
      { requiredKeys: [] },
    )
    .map(({ bounds, ...rest }) => ({ ...rest, ...bounds }));

/** A retry value with one thing wrong, and the name its error message must give. */
export const badRetry = (where: string): fc.Arbitrary<[name: string, retry: unknown]> =>
  fc.oneof(
    fc
      .oneof(fc.string(), fc.integer(), fc.boolean(), fc.constant(Symbol('retry')))
      .map((retry) => [where, retry] as [string, unknown]),
    fc
      .oneof(
        notANumber,
        fc.constant(NaN),
        fc.constant(-Infinity),
        fraction,
        fc.integer({ min: -1e6, max: -1 }),
      )
      .map((attempts) => [`${where}.attempts`, { attempts }] as [string, unknown]),
    badMs(0).map((delay) => [`${where}.delay`, { delay, maxDelay: 1000 }] as [string, unknown]),
    badNumber(1, 100).map((factor) => [`${where}.factor`, { factor }] as [string, unknown]),
    fc
      .oneof(badMs(0), fc.integer({ min: 0, max: 9 }))
      .map((maxDelay) => [`${where}.maxDelay`, { delay: 10, maxDelay }] as [string, unknown]),
    badNumber(0, 1).map((jitter) => [`${where}.jitter`, { jitter }] as [string, unknown]),
    fc
      .constantFrom('attempt', 'delays', 'backoff', 'max')
      .map((key) => [`'${key}'`, { [key]: 1 }] as [string, unknown]),
  );

/** Values of every kind a JavaScript caller can pass, including those JSON has no form for. */
export const anyValue: fc.Arbitrary<unknown> = fc.oneof(
  fc.anything({ maxDepth: 2 }),
  fc.constant(Symbol('value')),
  fc.constant(() => undefined),
  fc.bigInt(),
);
