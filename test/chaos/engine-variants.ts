/**
 * Broken builds of the engine, to show that the checker catches what the
 * protocol's safeguards prevent. lib/ carries no test switches: each variant
 * is a copy of lib/engine in a temp dir with one small string replacement,
 * and the chaos clients load that copy instead of lib/engine (`--engine`).
 * A patch whose anchor text is not found exactly once fails loudly, so an
 * engine refactoring cannot silently turn a variant back into the real thing.
 */
import { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../..', import.meta.url));

export type EngineVariant = 'real' | 'no-writeback' | 'quorum-1';

interface Patch {
  readonly file: string;
  readonly anchor: string;
  readonly replacement: string;
}

const PATCHES: Record<Exclude<EngineVariant, 'real'>, Patch> = {
  // Take the highest counter among the granting nodes as final without
  // carrying it to a quorum (the fencing scheme's second round skipped).
  'no-writeback': {
    file: 'token-settlement.ts',
    anchor: '  if (behind.length === 0) return tokens;\n',
    replacement: '  return tokens; // chaos variant: the fencing write-back round is skipped\n',
  },
  // One granting node is enough: no majority, no quorum intersection.
  'quorum-1': {
    file: 'lock-engine.ts',
    anchor: 'this.quorum = Math.floor(this.nodes.length / 2) + 1;',
    replacement: 'this.quorum = 1; // chaos variant: a single node grants the lock',
  },
};

/** Replaces `anchor` in `text`, which must contain it exactly once. */
export function patchOnce(
  text: string,
  anchor: string,
  replacement: string,
  where: string,
): string {
  const count = text.split(anchor).length - 1;
  if (count !== 1) {
    throw new Error(
      `engine variant: expected the anchor exactly once in ${where}, found it ${count} times; ` +
        `update test/chaos/engine-variants.ts to the engine's current code:\n${anchor}`,
    );
  }
  return text.replace(anchor, () => replacement);
}

export interface EngineBuild {
  readonly variant: EngineVariant;
  /** The module the chaos clients import. */
  readonly entry: string;
  /** Removes the copy (a no-op for the real engine). */
  dispose(): void;
}

/** The real engine, or a patched copy of it in a temp dir. */
export function buildEngine(variant: EngineVariant): EngineBuild {
  if (variant === 'real') {
    return { variant, entry: join(root, 'lib/engine/index.ts'), dispose: () => undefined };
  }
  const dir = mkdtempSync(join(tmpdir(), `redis-lock-${variant}-`));
  try {
    cpSync(join(root, 'lib/engine'), join(dir, 'engine'), { recursive: true });
    // Bare imports (ioredis) resolve from the copy as they do from lib/.
    symlinkSync(join(root, 'node_modules'), join(dir, 'node_modules'), 'dir');
    const { file, anchor, replacement } = PATCHES[variant];
    const path = join(dir, 'engine', file);
    writeFileSync(
      path,
      patchOnce(readFileSync(path, 'utf8'), anchor, replacement, `lib/engine/${file}`),
    );
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  return {
    variant,
    entry: join(dir, 'engine/index.ts'),
    dispose: () => rmSync(dir, { recursive: true, force: true }),
  };
}
