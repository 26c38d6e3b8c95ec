/**
 * Tests run the `tether` command as users do (bin/tether.js → dist/bundle/), so dist/ must be
 * the current sources: rebuild it (tsc, incremental) when any source is newer than the last
 * build, and bundle the CLI again (scripts/bundle-cli.mjs) when dist/ or the bundler is newer
 * than the bundle. That way `npm test`, `npm run test:interop` and a single `npx vitest run
 * FILE` all test what is in src/, and the CLI starts as fast in tests as it does installed.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

const root = join(import.meta.dirname, '..');

function newestSource(dir: string): number {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    newest = Math.max(newest, entry.isDirectory() ? newestSource(path) : statSync(path).mtimeMs);
  }
  return newest;
}

function mtime(path: string): number {
  try {
    return statSync(path).mtimeMs;
  } catch {
    return 0;
  }
}

const builtAt = () => mtime(join(root, 'dist', '.tsbuildinfo'));
/** The bundler writes meta.json last: a bundle without it is unfinished. */
const bundledAt = () => mtime(join(root, 'dist', 'bundle', 'meta.json'));
const bundler = join(root, 'scripts', 'bundle-cli.mjs');

/**
 * As root, several suites run the server as nobody (uid 65534) from this checkout. Under a
 * directory nobody cannot search (a 0700 home or mktemp -d) they would fail with "Cannot find
 * module"; say what is wrong instead.
 */
function checkReachableByNobody(): void {
  if (process.getuid?.() !== 0 || !existsSync('/usr/bin/setpriv')) return;
  for (let dir = root; dir !== dirname(dir); dir = dirname(dir)) {
    if ((statSync(dir).mode & 0o001) === 0) {
      throw new Error(
        `the tests run the server as nobody (uid 65534), who cannot reach ${root}: ${dir} is not searchable by others ` +
          `(mode ${(statSync(dir).mode & 0o777).toString(8)}). Run 'chmod o+x ${dir}' or clone elsewhere (.ci/run does the chmod itself).`,
      );
    }
  }
}

export default function setup(): void {
  checkReachableByNobody();
  const sources = Math.max(
    newestSource(join(root, 'src')),
    ...['tsconfig.json', 'tsconfig.build.json'].map((f) => statSync(join(root, f)).mtimeMs),
  );
  if (builtAt() < sources) {
    const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
    try {
      execFileSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.build.json')], { cwd: root, stdio: 'pipe' });
    } catch (err) {
      // Type errors still emit JavaScript (the tests then run the current code); `npm run
      // typecheck` is where they fail. Anything else (tsc missing) is fatal.
      const out = `${(err as { stdout?: Buffer }).stdout ?? ''}`;
      if (!/error TS\d+/.test(out)) throw err;
      process.stderr.write(`global-setup: dist/ built with type errors (see npm run typecheck):\n${out}`);
    }
  }
  if (bundledAt() < Math.max(builtAt(), mtime(bundler))) execFileSync(process.execPath, [bundler], { cwd: root, stdio: 'pipe' });
}
