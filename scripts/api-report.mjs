// The public API as a contract: one API Extractor report per entry point of package.json
// ("exports"), read from the declarations in dist/ (build first), checked in under api/.
//
//   node scripts/api-report.mjs           rewrites api/*.api.md after an intended API change
//   node scripts/api-report.mjs --check   fails when a report no longer matches (CI)
//
// A change to the public surface then shows in the pull request's diff of api/, and one made
// by accident fails CI. Members marked @internal are stripped from dist/ (stripInternal), so
// they never reach a report.
import { Extractor, ExtractorConfig } from '@microsoft/api-extractor';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const check = process.argv.includes('--check');
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
const temp = mkdtempSync(join(tmpdir(), 'api-report-'));
const problems = [];
mkdirSync(join(root, 'api'), { recursive: true });

try {
  for (const [subpath, target] of Object.entries(pkg.exports)) {
    if (typeof target !== 'object' || !target.types) continue; // ./package.json
    const name = subpath === '.' ? 'index' : subpath.slice(2).replaceAll('/', '-');
    const entry = join(root, target.types);
    if (!existsSync(entry)) {
      problems.push(`${subpath}: ${target.types} is missing; run \`npm run build\` first.`);
      continue;
    }
    const config = ExtractorConfig.prepare({
      configObject: {
        projectFolder: root,
        mainEntryPointFilePath: entry,
        bundledPackages: [],
        compiler: {
          overrideTsconfig: {
            compilerOptions: {
              target: 'ES2022',
              module: 'NodeNext',
              moduleResolution: 'NodeNext',
              lib: ['ES2023'],
              types: ['node'],
              strict: true,
              skipLibCheck: true,
            },
            files: [entry],
          },
        },
        apiReport: {
          enabled: true,
          reportFileName: name,
          reportFolder: join(root, 'api'),
          reportTempFolder: temp,
        },
        docModel: { enabled: false },
        dtsRollup: { enabled: false },
        tsdocMetadata: { enabled: false },
        messages: {
          compilerMessageReporting: { default: { logLevel: 'warning' } },
          extractorMessageReporting: {
            default: { logLevel: 'warning' },
            // The package does not tag releases (@public, @beta): what an entry point exports is public.
            'ae-missing-release-tag': { logLevel: 'none' },
            // A type used by an export but not exported itself is listed in the report instead.
            'ae-forgotten-export': { logLevel: 'none', addToApiReportFile: true },
            // Documentation quality, not the contract: left to review.
            'ae-undocumented': { logLevel: 'none' },
            'ae-unresolved-link': { logLevel: 'none' },
          },
          tsdocMessageReporting: { default: { logLevel: 'none' } },
        },
      },
      configObjectFullPath: undefined,
      packageJsonFullPath: join(root, 'package.json'),
    });
    const result = Extractor.invoke(config, { localBuild: !check, showVerboseMessages: false });
    if (check ? !result.succeeded || result.apiReportChanged : !result.succeeded) {
      problems.push(
        check && result.apiReportChanged
          ? `${subpath}: its public API differs from api/${name}.api.md. If the change is intended, ` +
              'run `npm run build && npm run api:update` and commit the report (and a changeset).'
          : `${subpath}: API Extractor reported ${result.errorCount} error(s), shown above.`,
      );
    }
  }
} finally {
  rmSync(temp, { recursive: true, force: true });
}

if (problems.length > 0) {
  console.error(problems.join('\n'));
  process.exit(1);
}
