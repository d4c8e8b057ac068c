/**
 * The package's layers, as rules that `npm run lint:deps` (and CI) checks:
 * the engine stands alone and could be published without Nest; the command
 * line tool and the fenced-write helpers build on the engine only; nothing
 * imports in a circle.
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
