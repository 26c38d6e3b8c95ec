// The `tether` command as bin/tether.js runs it: dist/cli/main.js (tsc's output) and
// everything it imports, node_modules included, bundled by esbuild into dist/bundle/: main.js
// (the command table) and one chunk per subcommand plus the chunks they share (code
// splitting keeps main.ts's lazy `import()`s lazy, so `tether exec` still loads no server and
// no zod). Loading a few files instead of ~80 ESM modules, ws's CommonJS among them (read by
// cjs-module-lexer), is most of what separated `tether exec -- true` from a minimal ws client
// (bench/start.ts). The library entries (dist/index.js, /client, …) stay tsc's modules.
//
// Run by `npm run build` and `prebench` after tsc, and by test/global-setup.ts when dist/ is
// newer than the bundle. Writes dist/bundle/meta.json (esbuild's metafile: which sources are
// in which chunk), which test/cli/startup.test.ts reads; it is not packed (`files` takes
// only .js and .d.ts).
import { rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
// Two levels under the root, as dist/cli is: main.ts finds ../../package.json from either
// (server/native/native.ts looks for the nearest package.json above it).
const outdir = join(root, 'dist', 'bundle');

rmSync(outdir, { recursive: true, force: true });
const result = await build({
  absWorkingDir: root,
  entryPoints: { main: 'dist/cli/main.js' },
  outdir,
  bundle: true,
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  // ws's optional native helpers: loaded at run time if installed (bufferutil is a dependency).
  external: ['bufferutil', 'utf-8-validate'],
  // Bundled CommonJS (ws) calls require() for node: built-ins and the externals above: an ES
  // module has none, so each chunk makes one (else esbuild's stub throws, and ws's
  // try/require of bufferutil would quietly go without it).
  banner: { js: "import { createRequire as __bundleCreateRequire } from 'node:module'; const require = __bundleCreateRequire(import.meta.url);" },
  // Not minified: stack traces keep their names and lines (minifying saved ~1 % of start-up).
  metafile: true,
  logLevel: 'warning',
});
writeFileSync(join(outdir, 'meta.json'), JSON.stringify(result.metafile));
