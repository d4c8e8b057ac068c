/**
 * `npm run docs:check`: every ```ts / ```typescript block of README.md and
 * docs/*.md, compiled with tsc against the built package (run
 * `npm run build` first), the way an app that installed it compiles:
 * `nestjs-redis-lock` and its subpaths resolve by the package name through
 * package.json "exports" to dist/.
 *
 * Each block is a module of its own in a temp dir. Errors are reported at
 * the doc's line (`docs/fencing.md:130:7 TS2304 ...`). Written before a
 * block, an HTML comment says how to check it:
 *
 * - `<!-- docs-check: prelude ... -->`: the TypeScript between `prelude` and
 *   `-->` goes before the block, for what a fragment takes from its
 *   surroundings (imports, `declare const locks: LockService;`, the app's own
 *   classes as `declare class`);
 * - `<!-- docs-check: skip (why) -->`: not checked; only for what cannot
 *   compile, such as pseudo-code.
 *
 * A relative import (`./orders.service.js`) is the reader's own file: the
 * check provides it, each name it imports typed `any`.
 */
import {
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const PACKAGE = 'nestjs-redis-lock';

const OPENING_FENCE = /^(\s*)```(ts|typescript)\s*$/;
const CLOSING_FENCE = /^\s*```\s*$/;
const DIRECTIVE = /^<!--\s*docs-check:\s*(\w+)(.*)$/;

/** A doc that cannot be checked as written: the message says what to change. */
class DocsCheckError extends Error {
  override readonly name = 'DocsCheckError';
}

interface Block {
  /** The Markdown file, relative to the repository root. */
  readonly doc: string;
  /** 1-based line of the opening fence. */
  readonly line: number;
  readonly code: string;
  /** Compiled before the block, from its `<!-- docs-check: prelude` comment. */
  readonly prelude?: string;
  /** 1-based line of the prelude's first line. */
  readonly preludeLine?: number;
  /** Why it is not checked, from its `<!-- docs-check: skip (why) -->` comment. */
  readonly skip?: string;
}

function docFiles(): string[] {
  const docs = readdirSync(join(ROOT, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .sort()
    .map((name) => `docs/${name}`);
  return ['README.md', ...docs];
}

interface Directive {
  readonly kind: string;
  /** What follows the kind: a skip's `(why)`, a prelude's code. */
  readonly body: string;
  /** 1-based line of the comment's first line. */
  readonly line: number;
  /** The comment opens on a line of its own, its body on the lines below. */
  readonly multiline: boolean;
}

/** The directive in the HTML comment that ends right above line `index`, if any. */
function directiveBefore(lines: readonly string[], index: number): Directive | undefined {
  let end = index - 1;
  while (end >= 0 && lines[end].trim() === '') end--;
  if (end < 0 || !lines[end].trim().endsWith('-->')) return undefined;
  let start = end;
  while (start >= 0 && !lines[start].trim().startsWith('<!--')) start--;
  if (start < 0) return undefined;
  const match = DIRECTIVE.exec(lines[start].trim());
  if (!match) return undefined;
  const indent = lines[start].length - lines[start].trimStart().length;
  const multiline = start !== end && match[2].trim() === '';
  const body = !multiline
    ? match[2].replace(/-->\s*$/, '')
    : lines
        .slice(start + 1, end)
        .map((line) => line.slice(Math.min(indent, line.length - line.trimStart().length)))
        .join('\n');
  return { kind: match[1], body, line: start + 1, multiline };
}

function blocksOf(doc: string): Block[] {
  const lines = readFileSync(join(ROOT, doc), 'utf8').split('\n');
  const blocks: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = OPENING_FENCE.exec(lines[i]);
    if (!open) continue;
    const indent = open[1].length;
    let end = i + 1;
    while (end < lines.length && !CLOSING_FENCE.test(lines[end])) end++;
    if (end === lines.length)
      throw new DocsCheckError(`${doc}:${i + 1}: the code block never ends`);
    const code = lines
      .slice(i + 1, end)
      .map((line) => line.slice(Math.min(indent, line.length - line.trimStart().length)))
      .join('\n');
    const directive = directiveBefore(lines, i);
    blocks.push({ doc, line: i + 1, code, ...howToCheck(doc, directive) });
    i = end;
  }
  return blocks;
}

function howToCheck(
  doc: string,
  directive: Directive | undefined,
): Pick<Block, 'prelude' | 'preludeLine' | 'skip'> {
  if (!directive) return {};
  // The body keeps its lines as they are in the doc, so errors in it point to the doc's line.
  if (directive.kind === 'prelude') {
    if (directive.body.trim() === '' || !directive.multiline) {
      throw new DocsCheckError(
        `${doc}:${directive.line}: a prelude's code goes on the lines between '<!-- docs-check: prelude' and '-->'`,
      );
    }
    return { prelude: directive.body, preludeLine: directive.line + 1 };
  }
  if (directive.kind === 'skip') {
    const why = /^\s*\((.+)\)\s*$/s.exec(directive.body)?.[1];
    if (why) return { skip: why };
    throw new DocsCheckError(
      `${doc}:${directive.line}: say why the block is skipped: <!-- docs-check: skip (pseudo-code) -->`,
    );
  }
  throw new DocsCheckError(
    `${doc}:${directive.line}: unknown directive '${directive.kind}'; use 'prelude' or 'skip (why)'`,
  );
}

/** `docs/fencing.md`, line 122 → `docs-fencing.md-L122.ts`. */
function fileNameOf(block: Block): string {
  return `${block.doc.replace(/\//g, '-')}-L${block.line}.ts`;
}

/**
 * A directory whose node_modules holds the repository's packages and this
 * package itself, so that imports resolve as in an app that installed it.
 */
function workDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'nestjs-redis-lock-docs-'));
  const modules = join(dir, 'node_modules');
  mkdirSync(modules);
  for (const entry of readdirSync(join(ROOT, 'node_modules'))) {
    if (entry.startsWith('.') || entry === PACKAGE) continue;
    symlinkSync(join(ROOT, 'node_modules', entry), join(modules, entry));
  }
  symlinkSync(ROOT, join(modules, PACKAGE), 'dir');
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ type: 'module', private: true }));
  return dir;
}

/** The reader's own modules the blocks import (`./orders.service.js`), every name typed `any`. */
function stubModules(blocks: readonly Block[]): Map<string, string> {
  const names = new Map<string, Set<string>>();
  const source = /import\s+(?:type\s+)?\{([^}]*)\}\s+from\s+'(\.\/[\w.-]+)\.js'/g;
  for (const block of blocks) {
    for (const [, list, path] of block.code.matchAll(source)) {
      const set = names.get(path) ?? new Set<string>();
      for (const name of list.split(',')) {
        const bare = name.replace(/^\s*type\s+/, '').trim();
        if (bare) set.add(bare.split(/\s+as\s+/)[0]);
      }
      names.set(path, set);
    }
  }
  const stubs = new Map<string, string>();
  for (const [path, set] of names) {
    const lines = [...set].flatMap((name) => [
      `export declare const ${name}: any;`,
      `export type ${name} = any;`,
    ]);
    stubs.set(`${path.slice(2)}.ts`, `${lines.join('\n')}\n`);
  }
  return stubs;
}

function compilerOptions(dir: string): ts.CompilerOptions {
  const parsed = ts.getParsedCommandLineOfConfigFile(
    join(ROOT, 'tsconfig.json'),
    {},
    {
      ...ts.sys,
      onUnRecoverableConfigFileDiagnostic: (diagnostic) => {
        throw new DocsCheckError(ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n'));
      },
    },
  );
  if (!parsed) throw new DocsCheckError('tsconfig.json could not be read');
  // The repository's settings (those of a Nest app: decorators, NodeNext, strict), but the
  // package by its name, not the source mapped by `paths`.
  const { paths: _paths, baseUrl: _baseUrl, ...options } = parsed.options;
  return { ...options, noEmit: true, rootDir: dir, typeRoots: [join(dir, 'node_modules/@types')] };
}

interface Located {
  readonly where: string;
  readonly text: string;
}

/** A block as compiled: its prelude's lines come first. */
interface Compiled {
  readonly block: Block;
  readonly preludeLines: number;
}

function locate(diagnostic: ts.Diagnostic, byFile: ReadonlyMap<string, Compiled>): Located {
  const text = `TS${diagnostic.code}: ${ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n')}`;
  if (!diagnostic.file || diagnostic.start === undefined) return { where: '', text };
  const { line, character } = diagnostic.file.getLineAndCharacterOfPosition(diagnostic.start);
  const entry = byFile.get(diagnostic.file.fileName);
  if (!entry) return { where: `${relative(ROOT, diagnostic.file.fileName)}:${line + 1}`, text };
  const { block, preludeLines } = entry;
  if (line < preludeLines) {
    return { where: `${block.doc}:${block.preludeLine! + line}:${character + 1} (prelude)`, text };
  }
  return { where: `${block.doc}:${block.line + 1 + line - preludeLines}:${character + 1}`, text };
}

function main(): number {
  if (!readdirSync(ROOT).includes('dist')) {
    console.error('docs:check compiles against dist/: run `npm run build` first');
    return 2;
  }
  const blocks = docFiles().flatMap(blocksOf);
  const checked = blocks.filter((block) => block.skip === undefined);
  const dir = workDir();
  try {
    const byFile = new Map<string, Compiled>();
    for (const block of checked) {
      const file = join(dir, fileNameOf(block));
      const prelude = block.prelude === undefined ? '' : `${block.prelude}\n`;
      // `export {}`: a module even without imports, so blocks share no names.
      writeFileSync(file, `${prelude}${block.code}\nexport {};\n`);
      byFile.set(file, { block, preludeLines: prelude.split('\n').length - 1 });
    }
    for (const [name, text] of stubModules(checked)) writeFileSync(join(dir, name), text);
    const program = ts.createProgram([...byFile.keys()], compilerOptions(dir));
    const diagnostics = ts.getPreEmitDiagnostics(program);
    for (const diagnostic of diagnostics) {
      const { where, text } = locate(diagnostic, byFile);
      console.error(`${where} ${text}`);
    }
    const skipped = blocks.filter((block) => block.skip !== undefined);
    const withPrelude = checked.filter((block) => block.prelude !== undefined).length;
    console.log(
      `${checked.length} TypeScript blocks in ${docFiles().length} Markdown files compiled against dist/ ` +
        `(${withPrelude} with a prelude), ${skipped.length} skipped` +
        skipped.map((b) => `\n  skipped ${b.doc}:${b.line}: ${b.skip}`).join('') +
        (diagnostics.length > 0 ? `\n${diagnostics.length} errors` : ''),
    );
    return diagnostics.length > 0 ? 1 : 0;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

try {
  process.exitCode = main();
} catch (error) {
  if (!(error instanceof DocsCheckError)) throw error;
  console.error(error.message);
  process.exitCode = 2;
}
