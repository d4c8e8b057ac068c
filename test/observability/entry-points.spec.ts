import { describe, expect, it } from '@jest/globals';
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const LIB = fileURLToPath(new URL('../../lib/', import.meta.url));

/** The packages a module loads, following its static relative imports through lib/. */
function packagesLoadedBy(entry: string): Set<string> {
  const packages = new Set<string>();
  const seen = new Set<string>();
  const visit = (file: string) => {
    if (seen.has(file)) return;
    seen.add(file);
    const source = readFileSync(file, 'utf8');
    // Static imports and re-exports that load a module (not `import type`, not `import()`).
    for (const [, clause, specifier] of source.matchAll(
      /^(?:import|export)\s+(type\s+)?(?:[^'";]*?\s+from\s+)?['"]([^'"]+)['"]/gm,
    )) {
      if (clause) continue;
      if (specifier.startsWith('.'))
        visit(resolve(dirname(file), specifier.replace(/\.js$/, '.ts')));
      else
        packages.add(
          specifier.startsWith('@')
            ? specifier.split('/').slice(0, 2).join('/')
            : specifier.split('/')[0],
        );
    }
  };
  visit(join(LIB, entry));
  return packages;
}

describe('entry points and optional peers', () => {
  it('the main entry and the engine never load @nestjs/terminus or @opentelemetry/api', () => {
    for (const entry of ['index.ts', 'engine/index.ts']) {
      const loaded = [...packagesLoadedBy(entry)];
      expect(loaded).not.toContain('@nestjs/terminus');
      expect(loaded.filter((name) => name.startsWith('@opentelemetry/'))).toEqual([]);
    }
  });

  it('the engine stays framework-free: no @nestjs package at all', () => {
    expect(
      [...packagesLoadedBy('engine/index.ts')].filter((n) => n.startsWith('@nestjs/')),
    ).toEqual([]);
  });

  it('nestjs-redis-lock/health loads @nestjs/terminus, and nestjs-redis-lock/telemetry only @opentelemetry/api besides the engine', () => {
    expect(packagesLoadedBy('health/index.ts')).toContain('@nestjs/terminus');
    expect([...packagesLoadedBy('telemetry/index.ts')].sort()).toEqual(
      ['@opentelemetry/api', ...packagesLoadedBy('engine/index.ts')].sort(),
    );
  });
});
