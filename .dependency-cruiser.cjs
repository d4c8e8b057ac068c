/**
 * The package's layers, as rules that `npm run lint:deps` (and CI) checks:
 * the engine stands alone and could be published without Nest; the command
 * line tool and the fenced-write helpers build on the engine only; the Nest
 * layer and the entry points on top of it reach the engine, and those entry
 * points the Nest layer, through their barrels only; nothing imports in a
 * circle.
 */
/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'engine-is-framework-free',
      comment:
        'lib/engine is the framework-free lock engine: no Nest, no OpenTelemetry, and none of the layers built on it.',
      severity: 'error',
      from: { path: '^lib/engine/' },
      to: {
        path: [
          '^lib/(nest|cli|health|telemetry|testing|fenced)/',
          '^lib/index\\.ts$',
          '(^|/)node_modules/@nestjs/',
          '(^|/)node_modules/@opentelemetry/',
        ],
      },
    },
    {
      name: 'cli-without-nest',
      comment: 'The command-line tool runs without Nest: it uses the engine only.',
      severity: 'error',
      from: { path: '^lib/cli/' },
      to: {
        path: ['^lib/(nest|health|testing)/', '^lib/index\\.ts$', '(^|/)node_modules/@nestjs/'],
      },
    },
    {
      name: 'fenced-without-nest',
      comment: 'The fenced-write helpers are framework-free, like the engine they build on.',
      severity: 'error',
      from: { path: '^lib/fenced/' },
      to: {
        path: [
          '^lib/(nest|cli|health|telemetry|testing)/',
          '^lib/index\\.ts$',
          '(^|/)node_modules/@nestjs/',
        ],
      },
    },
    {
      name: 'engine-through-its-barrels',
      comment:
        'Every other part of the package (the Nest layer, the CLI and the entry points) imports the engine through lib/engine/index.ts (its public names) or lib/engine/internal.ts (what the package shares besides), never one of its files: the engine moves code between its files freely. The fenced-write helpers are the one exception: they take only the error classes (lock-errors.ts), so that nestjs-redis-lock/fenced loads without the engine and ioredis.',
      severity: 'error',
      from: { path: ['^lib/(nest|cli|health|telemetry|testing)/', '^lib/index\\.ts$'] },
      to: { path: '^lib/engine/', pathNot: '^lib/engine/(index|internal)\\.ts$' },
    },
    {
      name: 'fenced-takes-only-the-errors',
      comment:
        'nestjs-redis-lock/fenced loads without the engine (and so without ioredis): of the engine it imports the error classes only.',
      severity: 'error',
      from: { path: '^lib/fenced/' },
      to: { path: '^lib/engine/', pathNot: '^lib/engine/lock-errors\\.ts$' },
    },
    {
      name: 'nest-through-its-barrels',
      comment:
        'The entry points built on the Nest layer import it through lib/nest/index.ts (its public names) or lib/nest/internal.ts (what they share besides), never one of its files.',
      severity: 'error',
      from: { path: ['^lib/(health|telemetry|testing)/', '^lib/index\\.ts$'] },
      to: { path: '^lib/nest/', pathNot: '^lib/nest/(index|internal)\\.ts$' },
    },
    {
      name: 'no-circular',
      comment:
        'Modules that import each other in a circle load in an order nobody chose. Type-only imports vanish at run time and do not count.',
      severity: 'error',
      from: { path: '^lib/' },
      to: { circular: true, viaOnly: { dependencyTypesNot: ['type-only'] } },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: {
      conditionNames: ['import', 'types', 'default', 'node'],
      extensions: ['.ts', '.js', '.d.ts'],
    },
  },
};
