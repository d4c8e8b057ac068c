/**
 * @jest-config-loader-options {"transpileOnly": true, "compilerOptions": {"module": "CommonJS", "moduleResolution": "Node10"}}
 */
// Jest reads this file through ts-node; transpiled only (`npm run typecheck` checks it), which
// takes every `jest` run 0.3 s to start instead of 3 s of type-checking.
import { availableParallelism } from 'node:os';
import { createDefaultEsmPreset, type JestConfigWithTsJest } from 'ts-jest';

// NestJS 12 is ESM-only, so the suite runs as native ESM
// (NODE_OPTIONS=--experimental-vm-modules, set by `npm test`).
// tsconfig.json has isolatedModules, so ts-jest only transpiles;
// `npm run typecheck` is the type gate.
const shared = {
  ...createDefaultEsmPreset({ tsconfig: 'tsconfig.json' }),
  testEnvironment: 'node',
  modulePathIgnorePatterns: ['<rootDir>/dist/'],
  moduleNameMapper: {
    '^(\\.{1,2}/.*)\\.js$': '$1',
    // The sample imports the package by name; under test that is lib/, not a build in dist/.
    '^nestjs-redis-lock$': '<rootDir>/lib/index.ts',
    '^nestjs-redis-lock/(engine|health|telemetry|fenced|testing)$': '<rootDir>/lib/$1/index.ts',
  },
} satisfies JestConfigWithTsJest;

const ALL = ['<rootDir>/test/**/*.spec.ts', '<rootDir>/test/**/*.e2e-spec.ts'];

/** Specs that start no server and spawn no process: seconds, for the edit-test loop. */
const UNIT = [
  'test/cli/cli-output.spec.ts',
  'test/engine/node-clock.spec.ts',
  'test/engine/wait-queue.spec.ts',
  'test/graphql/graphql-lock-failures.spec.ts',
  'test/input/engine-options.spec.ts',
  'test/nest/lock-key.spec.ts',
  'test/observability/entry-points.spec.ts',
  'test/sample/checkout.service.spec.ts',
  'test/support/nest-smoke.spec.ts',
  'test/testing/in-memory-engine.spec.ts',
  'test/testing/memory-leases.spec.ts',
  'test/testing/redis-lock-testing.module.spec.ts',
  'test/topologies/topology-specs.spec.ts',
].map((file) => `<rootDir>/${file}`);

/** The fault-injection suite and the packed-package checks: the slow ones, run by name. */
const CHAOS = ['<rootDir>/test/chaos/'];
const PACKAGE = ['<rootDir>/test/package/'];

/**
 * Four projects, each runnable alone (`npm run test:unit`, `test:integration`,
 * `test:chaos`, `test:package`); `npm test` runs them all.
 */
const config: JestConfigWithTsJest = {
  testTimeout: 30_000,
  // Two workers per core: most suites spend their time waiting (leases running out, child
  // processes starting, paused nodes), so four files at a time keep a 2-core machine busy where
  // two left it idle a third of the run. The specs that measure time allow for the load.
  maxWorkers: Math.min(4, 2 * availableParallelism()),
  projects: [
    { ...shared, displayName: 'unit', testMatch: UNIT },
    {
      ...shared,
      displayName: 'integration',
      testMatch: ALL,
      testPathIgnorePatterns: [...UNIT, ...CHAOS, ...PACKAGE, '/node_modules/'],
    },
    { ...shared, displayName: 'chaos', testMatch: ALL, roots: CHAOS },
    { ...shared, displayName: 'package', testMatch: ALL, roots: PACKAGE },
  ],
};

export default config;
