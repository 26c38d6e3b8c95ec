/**
 * Tests run the `tether` command as users do (bin/tether.js → dist/), so dist/ must be the
 * current sources: rebuild it (tsc, incremental) when any source is newer than the last
 * build. That way `npm test`, `npm run test:interop` and a single `npx vitest run FILE` all
 * test what is in src/, and the CLI starts as fast in tests as it does installed.
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';

const root = join(import.meta.dirname, '..');

function newestSource(dir: string): number {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    newest = Math.max(newest, entry.isDirectory() ? newestSource(path) : statSync(path).mtimeMs);
  }
  return newest;
}

function builtAt(): number {
  try {
    return statSync(join(root, 'dist', '.tsbuildinfo')).mtimeMs;
  } catch {
    return 0;
  }
}

export default function setup(): void {
  const sources = Math.max(
    newestSource(join(root, 'src')),
    ...['tsconfig.json', 'tsconfig.build.json'].map((f) => statSync(join(root, f)).mtimeMs),
  );
  if (builtAt() >= sources) return;
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
