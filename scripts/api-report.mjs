// The public API of the package as its shipped declarations (dist/**/*.d.ts) present it, one
// report per entry point of package.json "exports": every export, and every declaration of
// this package that an export's type refers to (followed transitively), printed by the
// TypeScript printer with comments dropped, and `@internal` and private members left out (no
// user can reach either; they change with every refactor).
//
// test/package/api-surface.test.ts compares it with test/api/*.api.txt, so an API change is a diff a
// reviewer sees; `npm run api:update` rewrites those files after an intended change.
//
// Usage: node scripts/api-report.mjs [--write DIR]   (needs dist/ built: npm run build)
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const root = path.join(path.dirname(fileURLToPath(import.meta.url)), '..');
const dist = path.join(root, 'dist') + path.sep;

/** Entry name ('.', './client', …) → its .d.ts, from package.json "exports". */
function entryPoints() {
  const { exports } = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8'));
  return Object.entries(exports)
    .filter(([, target]) => typeof target === 'object' && target.types)
    .map(([name, target]) => [name, path.join(root, target.types)]);
}

function isInternal(node) {
  if (ts.getCombinedModifierFlags(node) & ts.ModifierFlags.Private) return true;
  if (node.name && ts.isPrivateIdentifier(node.name)) return true;
  return ts.getJSDocTags(node).some((tag) => tag.tagName.text === 'internal');
}

/** A copy of a declaration without comments and without its @internal members. */
function trimmed(node) {
  const transform = (context) => {
    const visit = (n) => {
      if (n !== node && (ts.isClassElement(n) || ts.isTypeElement(n)) && isInternal(n)) return undefined;
      return ts.visitEachChild(n, visit, context);
    };
    return (n) => ts.visitNode(n, visit);
  };
  const [out] = ts.transform(node, [transform]).transformed;
  return out;
}

/** Declarations worth printing for a symbol (not imports, not whole source files). */
function declarationsOf(symbol) {
  return (symbol.declarations ?? []).filter((d) => !ts.isSourceFile(d) && !ts.isImportSpecifier(d) && !ts.isImportClause(d) && !ts.isNamespaceImport(d) && !ts.isExportSpecifier(d));
}

function report(program, entryFile) {
  const checker = program.getTypeChecker();
  const printer = ts.createPrinter({ removeComments: true, newLine: ts.NewLineKind.LineFeed });
  const source = program.getSourceFile(entryFile);
  const moduleSymbol = checker.getSymbolAtLocation(source);
  const lines = [];
  const seen = new Set();
  const queue = [];
  const resolve = (symbol) => (symbol.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(symbol) : symbol);
  const enqueue = (symbol) => {
    const target = resolve(symbol);
    if (seen.has(target)) return;
    const decls = declarationsOf(target);
    if (decls.length === 0 || !decls.every((d) => d.getSourceFile().fileName.startsWith(dist))) return;
    seen.add(target);
    queue.push(target);
  };
  const exported = checker.getExportsOfModule(moduleSymbol).sort((a, b) => a.name.localeCompare(b.name));
  lines.push(`exports: ${exported.map((s) => s.name).join(', ')}`, '');
  for (const symbol of exported) {
    const target = resolve(symbol);
    if (target.name !== symbol.name) lines.push(`export ${symbol.name} = ${target.name}`);
    enqueue(symbol);
  }
  lines.push('');
  while (queue.length > 0) {
    const symbol = queue.shift();
    for (const found of declarationsOf(symbol)) {
      // `export declare const X: …` is declared by its statement, not the bare declaration.
      const decl = ts.isVariableDeclaration(found) ? found.parent.parent : found;
      // Not which file declares it: moving a declaration between modules changes no API.
      const printed = printer.printNode(ts.EmitHint.Unspecified, trimmed(decl), decl.getSourceFile());
      lines.push(printed.replace(/^export (declare )?/, '').replace(/^declare /, ''), '');
      // Every name this declaration refers to that is declared in this package, transitively.
      const visit = (n) => {
        if (n !== decl && (ts.isClassElement(n) || ts.isTypeElement(n)) && isInternal(n)) return;
        if (ts.isTypeReferenceNode(n) || ts.isExpressionWithTypeArguments(n) || ts.isTypeQueryNode(n)) {
          const name = ts.isTypeReferenceNode(n) ? n.typeName : ts.isTypeQueryNode(n) ? n.exprName : n.expression;
          const referenced = checker.getSymbolAtLocation(ts.isQualifiedName(name) ? name.right : name);
          if (referenced) enqueue(referenced);
        }
        ts.forEachChild(n, visit);
      };
      ts.forEachChild(decl, visit);
    }
  }
  return `${lines.join('\n').replace(/\n{3,}/g, '\n\n').trimEnd()}\n`;
}

/** Entry name → report text. */
export function apiReports() {
  const entries = entryPoints();
  const program = ts.createProgram(
    entries.map(([, file]) => file),
    { strict: true, module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, target: ts.ScriptTarget.ES2022, types: ['node'], noEmit: true },
  );
  return new Map(entries.map(([name, file]) => [name, report(program, file)]));
}

/** './client' → 'client.api.txt', '.' → 'index.api.txt'. */
export function reportFileName(entry) {
  return `${entry === '.' ? 'index' : entry.replace(/^\.\//, '').replace(/\//g, '-')}.api.txt`;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const at = process.argv.indexOf('--write');
  const reports = apiReports();
  if (at === -1) {
    for (const [name, text] of reports) process.stdout.write(`==== ${name}\n${text}\n`);
  } else {
    const dir = path.resolve(process.argv[at + 1] ?? path.join(root, 'test', 'api'));
    mkdirSync(dir, { recursive: true });
    for (const [name, text] of reports) writeFileSync(path.join(dir, reportFileName(name)), text);
    process.stderr.write(`wrote ${reports.size} API reports to ${path.relative(process.cwd(), dir) || '.'}\n`);
  }
}
