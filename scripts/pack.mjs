#!/usr/bin/env node
/**
 * `npm run pack`: the package as users install it, tether-exec-<version>.tgz in the repo's root.
 *
 *   1. dist/ rebuilt from src/ (tsc);
 *   2. the native prebuilds (scripts/prebuild.mjs: linux-x64 and linux-arm64, or with
 *      --host-only this machine's architecture only);
 *   3. the package's files (package.json "files", as npm lists them) copied to .pack/ with a
 *      package.json that has no install, preinstall, postinstall or prepare script (nothing
 *      runs at install: no compiler needed, nothing for npm to warn about), no
 *      devDependencies, and not "private" (the clone's package.json is, and refuses `npm pack`
 *      and `npm publish` in its prepack: scripts/refuse-root-pack.mjs);
 *   4. `npm pack` there.
 *
 *   npm run pack [-- --host-only] [-- --out DIR]
 *
 * Prints the tarball's path on stdout; everything else goes to stderr.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, copyFileSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.join(path.dirname(fileURLToPath(import.meta.url)), '..');
const STAGE = path.join(root, '.pack');
/** Scripts a packed package keeps: the one that builds the native part from source. */
const KEPT_SCRIPTS = ['build:native'];

function log(line) {
  process.stderr.write(`pack: ${line}\n`);
}

/** npm's variables from an enclosing `npm run` would steer the nested npm (prefix, scripts). */
const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k) && k !== 'INIT_CWD'));

function parse(argv) {
  const opts = { hostOnly: false, out: root };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--host-only') opts.hostOnly = true;
    else if (argv[i] === '--out' && argv[i + 1]) opts.out = path.resolve(argv[++i]);
    else throw new Error(`unknown argument '${argv[i]}' (usage: npm run pack [-- --host-only] [-- --out DIR])`);
  }
  return opts;
}

function step(what, command, args, cwd = root) {
  log(what);
  const r = spawnSync(command, args, { cwd, env, stdio: ['ignore', 'inherit', 'inherit'] });
  if (r.error) throw new Error(`${what}: ${r.error.message}`);
  if (r.status !== 0) throw new Error(`${what} failed (exit ${r.status})`);
}

/** The package.json the tarball carries. */
function packedManifest(manifest) {
  const packed = { ...manifest };
  delete packed.devDependencies;
  // The clone's guard against `npm publish --ignore-scripts` from its root; the tarball is what is published.
  delete packed.private;
  packed.scripts = Object.fromEntries(Object.entries(manifest.scripts ?? {}).filter(([name]) => KEPT_SCRIPTS.includes(name)));
  return packed;
}

function main(argv) {
  const opts = parse(argv);
  const manifest = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8'));

  rmSync(path.join(root, 'dist'), { recursive: true, force: true });
  step('dist/ (tsc -p tsconfig.build.json)', process.execPath, [createRequire(import.meta.url).resolve('typescript/bin/tsc'), '-p', 'tsconfig.build.json']);
  step('dist/bundle/ (the CLI, scripts/bundle-cli.mjs)', process.execPath, [path.join(root, 'scripts', 'bundle-cli.mjs')]);
  // Built afresh: a --host-only pack must not ship another architecture's older build.
  rmSync(path.join(root, 'prebuilds'), { recursive: true, force: true });
  step(`prebuilds (${opts.hostOnly ? 'this machine only' : 'linux-x64 and linux-arm64'})`, process.execPath, [path.join(root, 'scripts', 'prebuild.mjs'), ...(opts.hostOnly ? ['--host-only'] : [])]);

  // The files npm itself would pack from here (package.json "files", plus package.json, README, LICENSE).
  const listed = JSON.parse(execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: root, env, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }));
  const files = listed[0].files.map((f) => f.path);
  const dir = path.join(STAGE, manifest.name);
  rmSync(STAGE, { recursive: true, force: true });
  for (const file of files) {
    const to = path.join(dir, file);
    mkdirSync(path.dirname(to), { recursive: true });
    if (file === 'package.json') writeFileSync(to, `${JSON.stringify(packedManifest(manifest), null, 2)}\n`);
    else {
      copyFileSync(path.join(root, file), to);
      chmodSync(to, statSync(path.join(root, file)).mode & 0o777);
    }
  }
  if (!files.some((f) => f.startsWith('prebuilds/'))) throw new Error('no prebuilds/ in the file list: package.json "files" must name them');

  mkdirSync(opts.out, { recursive: true });
  log(`npm pack (${files.length} files, from ${path.relative(root, dir)})`);
  const packed = JSON.parse(execFileSync('npm', ['pack', '--json', '--pack-destination', opts.out], { cwd: dir, env, encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] }));
  const tarball = path.join(opts.out, packed[0].filename);
  log(`${tarball}: ${packed[0].entryCount} files, ${(packed[0].size / 1024).toFixed(0)} KiB`);
  process.stdout.write(`${tarball}\n`);
}

try {
  main(process.argv.slice(2));
} catch (err) {
  log(err.message);
  process.exit(1);
}
