import { createDefaultEsmPreset, type JestConfigWithTsJest } from 'ts-jest';

// NestJS 12 is ESM-only, so the suite runs as native ESM
// (NODE_OPTIONS=--experimental-vm-modules, set by `npm test`).
// tsconfig.json has isolatedModules, so ts-jest only transpiles;
// `npm run typecheck` is the type gate.
const config: JestConfigWithTsJest = {
  ...createDefaultEsmPreset({ tsconfig: 'tsconfig.json' }),
  testEnvironment: 'node',
  testMatch: ['<rootDir>/test/**/*.spec.ts', '<rootDir>/test/**/*.e2e-spec.ts'],
  modulePathIgnorePatterns: ['<rootDir>/dist/'],
  moduleNameMapper: {
    '^(\\.{1,2}/.*)\\.js$': '$1',
    // The sample imports the package by name; under test that is lib/, not a build in dist/.
    '^nestjs-redis-lock$': '<rootDir>/lib/index.ts',
    '^nestjs-redis-lock/(engine|health|telemetry|fenced|testing)$': '<rootDir>/lib/$1/index.ts',
  },
  testTimeout: 30_000,
  maxWorkers: 2,
};

export default config;
