import { describe, expect, it } from '@jest/globals';
import fc from 'fast-check';
import { compileLockKey, MAX_KEY_VALUE_LENGTH } from '../../lib/nest/locked/lock-key.js';
import { LockKeyError, MAX_RESOURCE_LENGTH } from '../../lib/index.js';

const WHERE = 'OrdersService.pay';

/** The resources `key` names for one call of a method with `parameters` parameters. */
function keysFor(key: Parameters<typeof compileLockKey>[0], args: unknown[], parameters = 3) {
  return compileLockKey(key, WHERE, parameters).resolve(args);
}

/** The LockKeyError that `run` throws (fails the test if it throws anything else). */
function keyError(run: () => unknown): LockKeyError {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(LockKeyError);
    return error as LockKeyError;
  }
  throw new Error('expected a LockKeyError, but nothing was thrown');
}

describe('compileLockKey: templates', () => {
  it('<0> is the first argument as the method receives it', () => {
    expect(keysFor('order:<0>', [42])).toEqual(['order:42']);
    expect(keysFor('order:<0>', ['A-17'])).toEqual(['order:A-17']);
  });

  it('<1.id> and <0.customer.id> follow property paths, and numeric segments index arrays', () => {
    expect(keysFor('cart:<1.id>', ['ignored', { id: 'c9' }])).toEqual(['cart:c9']);
    expect(keysFor('customer:<0.customer.id>', [{ customer: { id: 7 } }])).toEqual(['customer:7']);
    expect(keysFor('sku:<0.items.1.sku>', [{ items: [{ sku: 'a' }, { sku: 'b' }] }])).toEqual([
      'sku:b',
    ]);
  });

  it('fills several placeholders of one template in place', () => {
    expect(keysFor('transfer:<0>:<1>:<2.currency>', ['acc1', 'acc2', { currency: 'EUR' }])).toEqual(
      ['transfer:acc1:acc2:EUR'],
    );
  });

  it('gives one resource per template, in order, and collapses duplicates', () => {
    expect(keysFor(['stock:<0.sku>', 'cart:<1>'], [{ sku: 'X1' }, 5])).toEqual([
      'stock:X1',
      'cart:5',
    ]);
    expect(keysFor(['account:<0>', 'account:<1>'], ['a', 'a'])).toEqual(['account:a']);
  });

  it('takes a template without placeholders as a constant resource', () => {
    expect(keysFor('nightly-report', [])).toEqual(['nightly-report']);
    expect(compileLockKey('nightly-report', WHERE, 0).maxIndex).toBe(-1);
  });

  it('reports the highest argument a template refers to', () => {
    expect(compileLockKey(['a:<0>', 'b:<2.id>:<1>'], WHERE, 3).maxIndex).toBe(2);
  });

  it('uses a function key as written: a string or an array of strings from the arguments', () => {
    const single = compileLockKey((id: number) => `order:${id}`, WHERE, 1);
    expect(single.resolve([3])).toEqual(['order:3']);
    const several = compileLockKey((a: string, b: string) => [`acct:${a}`, `acct:${b}`], WHERE, 2);
    expect(several.resolve(['x', 'y'])).toEqual(['acct:x', 'acct:y']);
    expect(several.resolve(['x', 'x'])).toEqual(['acct:x']);
    // A function key's text is the author's; it is not encoded.
    expect(single.resolve(['1:admin'])).toEqual(['order:1:admin']);
  });

  it.each([
    ['undefined', () => undefined, /returned undefined/],
    ['an empty array', () => [], /returned an empty array/],
    ['an empty string', () => '', /returned ''/],
    ['a number', () => 42, /returned number/],
    ['an array holding a non-string', () => ['ok', 7], /returned number/],
    [
      'an over-long resource',
      () => 'x'.repeat(MAX_RESOURCE_LENGTH + 1),
      new RegExp(`a string of ${MAX_RESOURCE_LENGTH + 1} characters`),
    ],
  ])(
    'rejects a function key that returns %s with a LockKeyError naming the method',
    (_, fn, message) => {
      const key = compileLockKey(fn as never, WHERE, 0);
      const error = keyError(() => key.resolve([]));
      expect(error.message).toMatch(message);
      expect(error.message).toContain(`@Locked() on ${WHERE}`);
      expect(error.code).toBe('LOCK_INVALID_KEY');
    },
  );
});

describe('compileLockKey: errors at decoration time', () => {
  it.each([
    ['a name instead of an index', 'order:<x>', "'<x>' is not a placeholder"],
    ['an empty placeholder', 'order:<>', "'<>' is not a placeholder"],
    ['a negative index', 'order:<-1>', "'<-1>' is not a placeholder"],
    ['a trailing dot', 'order:<0.>', "'<0.>' is not a placeholder"],
    ['an empty path segment', 'order:<0..id>', "'<0..id>' is not a placeholder"],
    ['a dash in a property name', 'order:<0.first-name>', "'<0.first-name>' is not a placeholder"],
    ['spaces', 'order:< 0 >', "'< 0 >' is not a placeholder"],
    ['an unclosed <', 'order:<0', "unbalanced '<' or '>'"],
    ['a stray >', 'order:0>', "unbalanced '<' or '>'"],
    ['a nested <', 'order:<<0>', "unbalanced '<' or '>'"],
    ['an empty template', '', 'the key template is empty'],
  ])('rejects %s with a LockKeyError naming the class and method', (_, template, message) => {
    const error = keyError(() => compileLockKey(template, WHERE, 1));
    expect(error.message).toContain(message);
    expect(error.message).toContain(`@Locked('${template}') on ${WHERE}`);
  });

  it('rejects an index beyond the declared parameters, saying how many there are', () => {
    const error = keyError(() => compileLockKey('order:<3>', WHERE, 1));
    expect(error.message).toBe(
      `@Locked('order:<3>') on ${WHERE}: <3> refers to argument 3, but the method declares 1 parameter (arguments count from <0>).`,
    );
    expect(keyError(() => compileLockKey('order:<0>', WHERE, 0)).message).toContain(
      'declares 0 parameters',
    );
  });

  it('checks every template of an array, and quotes them all', () => {
    const error = keyError(() => compileLockKey(['stock:<0>', 'cart:<2>'], WHERE, 2));
    expect(error.message).toContain(`@Locked(['stock:<0>', 'cart:<2>']) on ${WHERE}: <2>`);
    expect(keyError(() => compileLockKey(['ok:<0>', 'bad:<y>'], WHERE, 1)).message).toContain(
      "'<y>' is not a placeholder",
    );
  });

  it.each([
    ['an empty array', []],
    ['an array holding a non-string', ['a:<0>', 5]],
    ['a number', 42],
    ['null', null],
  ])('rejects %s as the key', (_, key) => {
    expect(keyError(() => compileLockKey(key as never, WHERE, 1)).message).toContain(
      `@Locked() on ${WHERE} needs a key`,
    );
  });

  it('skips the index check when the parameter count is unknown (no decorator metadata)', () => {
    const key = compileLockKey('order:<4>', WHERE, undefined);
    expect(key.resolve([0, 1, 2, 3, 'x'])).toEqual(['order:x']);
  });
});

describe('compileLockKey: values at call time', () => {
  const order = compileLockKey('order:<0>', WHERE, 1);

  it.each([
    ['undefined', undefined, 'is undefined; the method received no value for that argument'],
    ['null', null, 'is null; the method received no value for that argument'],
    ['an object', { id: 1 }, 'is an object; a lock key takes a string or a number'],
    ['an array', [1, 2], 'is an array; a lock key takes a string or a number'],
    ['a boolean', true, 'is boolean; a lock key takes a string or a number'],
    ['a symbol', Symbol('s'), 'is symbol'],
    ['a function', () => 1, 'is function'],
    ['NaN', NaN, 'is NaN; a lock key needs a finite number'],
    ['Infinity', Infinity, 'is Infinity; a lock key needs a finite number'],
    ['an empty string', '', 'is an empty string; a lock key needs a value'],
    ['a lone surrogate', 'a\uD800b', 'is not well-formed Unicode'],
  ])(
    'refuses %s with a LockKeyError that names the template, method and placeholder',
    (_, value, message) => {
      const error = keyError(() => order.resolve([value]));
      expect(error.message).toContain(`@Locked('order:<0>') on ${WHERE}: <0> ${message}`);
      expect(error.code).toBe('LOCK_INVALID_KEY');
    },
  );

  it('points an object argument at the property form in its message', () => {
    expect(keyError(() => order.resolve([{ id: 1 }])).message).toContain(
      'Point the placeholder at a property that holds one (such as <0.id>) or pass a function key.',
    );
  });

  it('asks for the value, not for the property form, when a property the template names is missing', () => {
    const key = compileLockKey('order:<0.id>', WHERE, 1);
    const message = keyError(() => key.resolve([{ name: 'no id' }])).message;
    expect(message).toContain(
      '<0.id> is undefined; the argument the method received has no value there',
    );
    expect(message).not.toContain('Point the placeholder');
  });

  it('refuses a path through a missing property as undefined, naming the whole placeholder', () => {
    const key = compileLockKey('customer:<0.customer.id>', WHERE, 1);
    expect(keyError(() => key.resolve([{}])).message).toContain('<0.customer.id> is undefined');
    expect(keyError(() => key.resolve([{ customer: null }])).message).toContain(
      '<0.customer.id> is undefined',
    );
    expect(keyError(() => key.resolve([null])).message).toContain('<0.customer.id> is undefined');
  });

  it('refuses an argument the caller left out', () => {
    expect(keyError(() => order.resolve([])).message).toContain('<0> is undefined');
  });

  it("keys on a parameter's default value through a key function with the same default", () => {
    // A template reads the arguments as passed (above); a function applies its own defaults.
    const withDefault = compileLockKey((id = 'all') => `report:${id}`, WHERE, 1);
    expect(withDefault.resolve([])).toEqual(['report:all']);
    expect(withDefault.resolve(['7'])).toEqual(['report:7']);
  });

  it(`accepts values up to ${MAX_KEY_VALUE_LENGTH} characters and refuses longer ones`, () => {
    const longest = 'v'.repeat(MAX_KEY_VALUE_LENGTH);
    expect(order.resolve([longest])).toEqual([`order:${longest}`]);
    expect(keyError(() => order.resolve([`${longest}v`])).message).toBe(
      `@Locked('order:<0>') on ${WHERE}: <0> is ${MAX_KEY_VALUE_LENGTH + 1} characters long; at most ${MAX_KEY_VALUE_LENGTH} go into a lock key.`,
    );
  });

  it('refuses a key that grows past the engine limit once encoded, as a LockKeyError', () => {
    // 200 slashes are 600 characters once percent-encoded.
    const error = keyError(() => order.resolve(['/'.repeat(MAX_KEY_VALUE_LENGTH)]));
    expect(error.message).toContain(
      `makes a key of ${'order:'.length + 3 * MAX_KEY_VALUE_LENGTH} characters once its values are encoded; at most ${MAX_RESOURCE_LENGTH}`,
    );
    // Several values that are each short enough can add up too.
    const triple = compileLockKey('t:<0>:<1>:<2>', WHERE, 3);
    const value = 'a'.repeat(MAX_KEY_VALUE_LENGTH);
    expect(keyError(() => triple.resolve([value, value, value])).message).toContain(
      `@Locked('t:<0>:<1>:<2>') on ${WHERE} makes a key of`,
    );
  });
});

describe('compileLockKey: encoding', () => {
  const order = compileLockKey('order:<0>', WHERE, 1);
  const orderAdmin = compileLockKey('order:<0>:admin', WHERE, 1);

  it("keeps an argument like '1:admin' from forging another template's key", () => {
    const [forged] = order.resolve(['1:admin']);
    const [genuine] = orderAdmin.resolve(['1']);
    expect(genuine).toBe('order:1:admin');
    expect(forged).toBe('order:1%3Aadmin');
    expect(forged).not.toBe(genuine);
  });

  it.each([
    ['a/b', 'order:a%2Fb'],
    ['{x}', 'order:%7Bx%7D'],
    ['<0>', 'order:%3C0%3E'],
    ['a b', 'order:a%20b'],
    ['50%', 'order:50%25'],
    ['a%3Ab', 'order:a%253Ab'],
    ['ü', 'order:%C3%BC'],
    ['日本', 'order:%E6%97%A5%E6%9C%AC'],
    ['😀', 'order:%F0%9F%98%80'],
    ['\n', 'order:%0A'],
  ])('percent-encodes %j as UTF-8 so it stays one opaque value', (value, key) => {
    expect(order.resolve([value])).toEqual([key]);
  });

  it('leaves letters, digits and _ . ~ - as they are', () => {
    expect(order.resolve(['Az09_.~-'])).toEqual(['order:Az09_.~-']);
  });

  it('renders numbers and bigints plainly, so a number and its decimal string lock the same resource', () => {
    expect(order.resolve([42])).toEqual(['order:42']);
    expect(order.resolve(['42'])).toEqual(['order:42']);
    expect(order.resolve([-7])).toEqual(['order:-7']);
    expect(order.resolve([1.5])).toEqual(['order:1.5']);
    expect(order.resolve([0])).toEqual(['order:0']);
    expect(order.resolve([12345678901234567890n])).toEqual(['order:12345678901234567890']);
  });

  // Well-formed strings within the length limit: every code point, including the characters
  // a key is built from (':', '{', '}', '<', '>', '%').
  const value = fc.string({ unit: 'binary', minLength: 1, maxLength: 40 });
  const keyish = fc.string({
    unit: fc.constantFrom(':', '{', '}', '<', '>', '%', '/', 'a', '1', '3', 'A'),
    minLength: 1,
    maxLength: 12,
  });

  it('gives distinct argument values distinct keys (property)', () => {
    fc.assert(
      fc.property(fc.oneof(value, keyish), fc.oneof(value, keyish), (a, b) => {
        fc.pre(a !== b);
        expect(order.resolve([a])[0]).not.toBe(order.resolve([b])[0]);
      }),
      { numRuns: 2000 },
    );
  });

  it('keeps the structure of a several-placeholder key unambiguous (property)', () => {
    const pair = compileLockKey('x:<0>:<1>', WHERE, 2);
    const arg = fc.oneof(value, keyish);
    fc.assert(
      fc.property(arg, arg, arg, arg, (a, b, c, d) => {
        fc.pre(a !== c || b !== d);
        expect(pair.resolve([a, b])[0]).not.toBe(pair.resolve([c, d])[0]);
      }),
      { numRuns: 2000 },
    );
  });

  it('encodes reversibly, using only unreserved characters and % escapes (property)', () => {
    fc.assert(
      fc.property(fc.oneof(value, keyish), (v) => {
        const encoded = order.resolve([v])[0].slice('order:'.length);
        expect(encoded).toMatch(/^(?:[\w.~-]|%[0-9A-F]{2})+$/);
        expect(decodeURIComponent(encoded)).toBe(v);
      }),
      { numRuns: 2000 },
    );
  });

  it('refuses every string holding a lone surrogate instead of merging them into one key (property)', () => {
    const lone = fc.integer({ min: 0xd800, max: 0xdfff }).map((c) => String.fromCharCode(c));
    // ASCII around it, so it cannot pair up with a neighbour.
    const ascii = fc.string({ unit: 'grapheme-ascii', maxLength: 5 });
    fc.assert(
      fc.property(ascii, lone, ascii, (before, surrogate, after) => {
        expect(() => order.resolve([before + surrogate + after])).toThrow(LockKeyError);
      }),
    );
  });
});
