#!/usr/bin/env node
/**
 * A clone's `npm install` (the `install` script; the packed package has none): builds the
 * native part from source (`node-gyp rebuild --directory=native`) when this machine has what
 * node-gyp needs, else says in one line on stderr that only the client commands will work
 * and exits 0, so a clone without a C compiler still installs. A build that starts and fails
 * fails the install, as before.
 */
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.join(path.dirname(fileURLToPath(import.meta.url)), '..');

function onPath(command) {
  return spawnSync('sh', ['-c', 'command -v "$1" >/dev/null', 'sh', command]).status === 0;
}

const cc = (process.env.CC ?? 'cc').split(/\s+/)[0];
const lacks = [
  [cc, onPath(cc)],
  ['make', onPath('make')],
  ['python3', onPath('python3') || onPath('python')],
  ['node-gyp', onPath('node-gyp')], // npm puts its own on PATH for scripts
]
  .filter(([, found]) => !found)
  .map(([name]) => name);

if (lacks.length > 0) {
  process.stderr.write(
    `tether: native part not built (not on PATH: ${lacks.join(', ')}): the client commands work; 'tether serve' needs it: npm run build:native, with a C compiler, make and python3 (see docs/install.md)\n`,
  );
  process.exit(0);
}
const result = spawnSync('node-gyp', ['rebuild', '--directory=native'], { cwd: root, stdio: 'inherit' });
process.exit(result.status ?? 1);
