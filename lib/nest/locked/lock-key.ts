import { MAX_RESOURCE_LENGTH, resourceProblem } from '../../engine/internal.js';
import { LockKeyError } from './locked.errors.js';

/**
 * Builds the resource name(s) from the method's arguments (as the method
 * receives them). `Args` are the parameters the function declares: `@Locked()`
 * accepts it only on a method whose parameters fit them.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- by default, any method's arguments
export type LockKeyFunction<Args extends unknown[] = any[]> = (
  ...args: Args
) => string | readonly string[];

/**
 * What `@Locked()` locks: a template such as `'order:<0>'` (`<0>` is the
 * method's first argument, `<1.id>` a property of the second), several
 * templates locked together, or a function of the arguments. In a scheduled
 * job's template, `<tick>` is the scheduled fire time (epoch ms), so that
 * each tick has a lock of its own: `'report:<tick>'`.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- by default, any method's arguments
export type LockKey<Args extends unknown[] = any[]> =
  string | readonly string[] | LockKeyFunction<Args>;

/** Longest argument value accepted in a template, before encoding. */
export const MAX_KEY_VALUE_LENGTH = 200;

interface Placeholder {
  readonly text: string;
  readonly index: number;
  readonly path: readonly string[];
}

/** `<tick>`: filled in with the tick the call belongs to. */
const TICK = Symbol('tick');

type Part = string | Placeholder | typeof TICK;

/** A key, parsed once at decoration time. */
export interface CompiledLockKey {
  /** The resource names for one call; throws LockKeyError for values that cannot be keys. */
  resolve(args: readonly unknown[], tick?: number): readonly string[];
  /** The highest argument index a template refers to, -1 for none. */
  readonly maxIndex: number;
  /** True when a template names `<tick>`: resolve() then needs the tick. */
  readonly usesTick: boolean;
}

const PLACEHOLDER = /<([^<>]*)>/g;
const INDEX_AND_PATH = /^(\d+)((?:\.[A-Za-z_$][\w$]*|\.\d+)*)$/;

/**
 * Parses `key` for the method named by `where` (e.g. `OrdersService.pay`),
 * which declares `parameterCount` parameters (undefined when unknown).
 */
export function compileLockKey(
  key: LockKey,
  where: string,
  parameterCount: number | undefined,
  name = 'Locked',
): CompiledLockKey {
  if (typeof key === 'function') return compileFunction(key, where, name);
  const templates = typeof key === 'string' ? [key] : key;
  if (
    !Array.isArray(templates) ||
    templates.length === 0 ||
    templates.some((t) => typeof t !== 'string')
  ) {
    throw new LockKeyError(
      `@${name}() on ${where} needs a key: a template such as 'order:<0>', an array of templates, or a function of the arguments.`,
    );
  }
  const parsed = templates.map((template) => parseTemplate(template, where, name));
  const maxIndex = Math.max(
    -1,
    ...parsed.flatMap((parts) =>
      parts.filter((p): p is Placeholder => typeof p === 'object').map((p) => p.index),
    ),
  );
  const usesTick = parsed.some((parts) => parts.includes(TICK));
  if (parameterCount !== undefined && maxIndex >= parameterCount) {
    throw new LockKeyError(
      `@${name}(${quote(templates)}) on ${where}: <${maxIndex}> refers to argument ${maxIndex}, but the method declares ` +
        `${parameterCount} parameter${parameterCount === 1 ? '' : 's'} (arguments count from <0>).`,
    );
  }
  if (parsed.length === 1) {
    const [parts] = parsed;
    const [template] = templates;
    return {
      maxIndex,
      usesTick,
      resolve: (args, tick) => [render(parts, args, template, where, tick, name)],
    };
  }
  return {
    maxIndex,
    usesTick,
    resolve: (args, tick) => [
      ...new Set(parsed.map((parts, i) => render(parts, args, templates[i], where, tick, name))),
    ],
  };
}

function parseTemplate(template: string, where: string, name: string): Part[] {
  const parts: Part[] = [];
  let last = 0;
  for (const match of template.matchAll(PLACEHOLDER)) {
    if (match[1] === 'tick') {
      parts.push(template.slice(last, match.index), TICK);
      last = match.index + match[0].length;
      continue;
    }
    const found = INDEX_AND_PATH.exec(match[1]);
    if (!found) {
      throw new LockKeyError(
        `@${name}('${template}') on ${where}: '${match[0]}' is not a placeholder; write <0> for the first argument, ` +
          '<0.id> or <1.customer.id> for a property of one, or <tick> for the fire time of a scheduled job.',
      );
    }
    parts.push(template.slice(last, match.index));
    parts.push({
      text: match[0],
      index: Number(found[1]),
      path: found[2] ? found[2].slice(1).split('.') : [],
    });
    last = match.index + match[0].length;
  }
  parts.push(template.slice(last));
  const literal = parts.filter((p): p is string => typeof p === 'string').join('');
  if (/[<>]/.test(literal)) {
    throw new LockKeyError(
      `@${name}('${template}') on ${where}: unbalanced '<' or '>'; placeholders look like <0> or <0.id>.`,
    );
  }
  if (template.length === 0)
    throw new LockKeyError(`@${name}('') on ${where}: the key template is empty.`);
  return parts.filter((p) => p !== '');
}

function render(
  parts: readonly Part[],
  args: readonly unknown[],
  template: string,
  where: string,
  tick: number | undefined,
  name: string,
): string {
  let key = '';
  for (const part of parts) {
    if (typeof part === 'string') {
      key += part;
      continue;
    }
    if (part === TICK) {
      // Computed by the decorator, never from a caller's input: a whole number of ms.
      if (tick === undefined)
        throw new LockKeyError(`@${name}('${template}') on ${where}: <tick> has no value.`);
      key += String(tick);
      continue;
    }
    let value: unknown = args[part.index];
    for (const property of part.path) {
      value =
        value === null || value === undefined
          ? undefined
          : (value as Record<string, unknown>)[property];
    }
    key += encodeValue(value, part.text, template, where, name);
  }
  // Encoding can triple a value, and several values add up: catch it here, as a key error,
  // rather than as the engine's LockOptionsError (which no transport maps to 400).
  if (key.length > MAX_RESOURCE_LENGTH) {
    throw new LockKeyError(
      `@${name}('${template}') on ${where} makes a key of ${key.length} characters once its values are encoded; ` +
        `at most ${MAX_RESOURCE_LENGTH} are allowed. Use shorter values, or a function key that hashes them.`,
      'The request cannot be locked: its lock key is too long.',
    );
  }
  return key;
}

/**
 * Turns an argument into part of a key. Anything beyond letters, digits and
 * `_ . ~ -` is percent-encoded, so a value such as `'1:admin'` cannot forge
 * the structure of another key (`order:1:admin` vs `order:<0>:admin`).
 */
function encodeValue(
  value: unknown,
  placeholder: string,
  template: string,
  where: string,
  name: string,
): string {
  // The common case first: a short string of safe characters is its own encoding.
  if (
    typeof value === 'string' &&
    value.length > 0 &&
    value.length <= MAX_KEY_VALUE_LENGTH &&
    SAFE_VALUE.test(value)
  ) {
    return value;
  }
  // The developer's message names the method and template; the client's names only the value.
  const fail = (problem: string, advice: string): never => {
    throw new LockKeyError(
      `@${name}('${template}') on ${where}: ${placeholder} ${problem}; ${advice}`,
      `The request cannot be locked: ${placeholder} ${problem}.`,
    );
  };
  let text: string;
  if (typeof value === 'string') {
    if (value.length === 0) fail('is an empty string', 'a lock key needs a value.');
    // A lone surrogate has no UTF-8 form: percent-encoding would turn every one of them
    // into U+FFFD's bytes, so distinct values would share a key.
    if (LONE_SURROGATE.test(value)) {
      fail(
        'is not well-formed Unicode (it contains a lone surrogate)',
        'it cannot be encoded into a lock key.',
      );
    }
    text = value;
  } else if (typeof value === 'number') {
    if (!Number.isFinite(value)) fail(`is ${value}`, 'a lock key needs a finite number.');
    text = String(value);
  } else if (typeof value === 'bigint') {
    text = String(value);
  } else {
    const kind =
      value === null
        ? 'null'
        : Array.isArray(value)
          ? 'an array'
          : typeof value === 'object'
            ? 'an object'
            : typeof value;
    if (value === undefined || value === null) {
      // The template already points where the value should be: what is missing is the value.
      return fail(
        `is ${kind}`,
        placeholder.includes('.')
          ? 'the argument the method received has no value there: make sure callers set it (a required field of the body or DTO), or pass a function key that picks another value.'
          : 'the method received no value for that argument: make sure callers pass one, or pass a function key that picks another value.',
      );
    }
    return fail(
      `is ${kind}`,
      'a lock key takes a string or a number. Point the placeholder at a property that holds one (such as <0.id>) or pass a function key.',
    );
  }
  if (text.length > MAX_KEY_VALUE_LENGTH) {
    fail(
      `is ${text.length} characters long`,
      `at most ${MAX_KEY_VALUE_LENGTH} go into a lock key.`,
    );
  }
  return SAFE_VALUE.test(text) ? text : text.replace(UNSAFE_CHARACTER, percentEncode);
}

const SAFE_VALUE = /^[\w.~-]*$/;
const LONE_SURROGATE = /\p{Cs}/u;
const UNSAFE_CHARACTER = /[^\w.~-]/gu;

function percentEncode(character: string): string {
  return Buffer.from(character).toString('hex').toUpperCase().replace(/../g, '%$&');
}

function compileFunction(key: LockKeyFunction, where: string, name: string): CompiledLockKey {
  return {
    maxIndex: -1,
    usesTick: false,
    resolve(args) {
      const result = key(...args);
      const list = typeof result === 'string' ? [result] : result;
      if (!Array.isArray(list) || list.length === 0) {
        throw new LockKeyError(
          `The key function of @${name}() on ${where} returned ${describe(result)}; return a string or an array of strings.`,
        );
      }
      for (const resource of list) {
        const problem = resourceProblem(resource);
        if (problem) {
          throw new LockKeyError(
            `The key function of @${name}() on ${where} returned ${describe(resource)} (${problem}); each resource must be a string of 1 to ${MAX_RESOURCE_LENGTH} characters.`,
          );
        }
      }
      return list.length === 1 ? list : [...new Set(list)];
    },
  };
}

function describe(value: unknown): string {
  if (typeof value === 'string')
    return value.length > 40 ? `a string of ${value.length} characters` : `'${value}'`;
  if (Array.isArray(value)) return value.length === 0 ? 'an empty array' : 'an array';
  return value === null ? 'null' : typeof value;
}

function quote(templates: readonly string[]): string {
  return templates.length === 1
    ? `'${templates[0]}'`
    : `[${templates.map((t) => `'${t}'`).join(', ')}]`;
}
