#!/usr/bin/env node
/**
 * Builds the native parts the package ships, so that installing it needs no compiler:
 *
 *   prebuilds/linux-<arch>/tether-keeper             static (glibc's libc.a): one binary for every Linux libc
 *   prebuilds/linux-<arch>/tether_native.glibc.node  the addon for glibc (no symbol newer than GLIBC_2.17)
 *   prebuilds/linux-<arch>/tether_native.musl.node   the addon for musl (Alpine)
 *
 * for <arch> x64 and arm64, with plain compiler commands (no node-gyp: no headers to download;
 * node_api.h comes from the node-api-headers dev dependency). The addon uses N-API version 8
 * only, so one build loads in Node 20, 22 and 24.
 *
 * The keeper is linked statically against glibc, not musl (which also works and is ten times
 * smaller): glibc's execvp runs a file without a #! line through /bin/sh, as POSIX asks and as
 * a source build on a glibc system does; musl's answers ENOEXEC. Linked statically it needs no
 * C library on the machine it runs on (Alpine included), only Linux 3.2 or later.
 *
 *   node scripts/prebuild.mjs              all four targets (needs the cross toolchains)
 *   node scripts/prebuild.mjs --host-only  this machine's architecture only
 *
 * Each file is checked after it is built (architecture, static, libc, GLIBC version floor);
 * a missing toolchain is named with the apt line that installs it. Logs go to stderr.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, renameSync, rmSync } from 'node:fs';
import { arch as hostArch } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.join(path.dirname(fileURLToPath(import.meta.url)), '..');
const NATIVE = path.join(root, 'native');
const OUT = path.join(root, 'prebuilds');
/** The newest glibc symbol version the glibc addon may need (docs/install.md states it). */
export const GLIBC_FLOOR = '2.17';
const NAPI_VERSION = 8;
const CFLAGS = ['-std=gnu11', '-O2', '-Wall', '-Wextra', '-Wno-unused-parameter', '-s'];

/**
 * How to build for each architecture. `glibc` and `musl` are the compiler commands (with their
 * arguments) for that libc; `packages` the Debian packages that provide them.
 */
const TARGETS = {
  x64: {
    machine: 'Advanced Micro Devices X86-64',
    glibc: ['gcc'],
    musl: ['musl-gcc'],
    glibcApt: ['gcc', 'libc6-dev'],
    muslApt: ['musl-tools'],
    // Only a native gcc can compile for x64 here; a cross gcc for x64 on arm64 is x86-64-linux-gnu-gcc.
    crossGlibc: ['x86_64-linux-gnu-gcc'],
  },
  arm64: {
    machine: 'AArch64',
    glibc: ['aarch64-linux-gnu-gcc'],
    musl: ['aarch64-linux-gnu-gcc', '-specs', '/usr/lib/aarch64-linux-musl/musl-gcc.specs'],
    glibcApt: ['gcc-aarch64-linux-gnu', 'libc6-dev-arm64-cross'],
    muslApt: ['gcc-aarch64-linux-gnu', 'musl-dev:arm64'],
  },
};

function log(line) {
  process.stderr.write(`prebuild: ${line}\n`);
}

function onPath(command) {
  return spawnSync('sh', ['-c', `command -v "$1" >/dev/null`, 'sh', command]).status === 0;
}

/** The compiler command for `arch` and `libc`, run natively or through a cross compiler. */
function compiler(arch, libc) {
  const t = TARGETS[arch];
  if (arch === 'x64' && hostArch() !== 'x64') return libc === 'glibc' ? t.crossGlibc : null;
  return t[libc];
}

/** What is missing to build `arch` (an empty list: nothing). */
function missing(arch) {
  const t = TARGETS[arch];
  const lacks = [];
  const glibc = compiler(arch, 'glibc');
  const musl = compiler(arch, 'musl');
  if (!glibc || !onPath(glibc[0])) lacks.push(...t.glibcApt);
  // The static keeper links glibc's libc.a (gcc prints the bare name when it has none).
  else if (!path.isAbsolute(execFileSync(glibc[0], [...glibc.slice(1), '-print-file-name=libc.a'], { encoding: 'utf8' }).trim())) lacks.push(...t.glibcApt);
  if (!musl || !onPath(musl[0])) lacks.push(...t.muslApt);
  // The cross musl build needs musl's own files for that architecture (its gcc specs file).
  const specs = musl?.includes('-specs') ? musl[musl.indexOf('-specs') + 1] : undefined;
  if (specs && !existsSync(specs)) lacks.push(...t.muslApt.filter((p) => p.includes(':')));
  return [...new Set(lacks)];
}

function aptLine(packages) {
  const foreign = packages.filter((p) => p.includes(':')).map((p) => p.split(':')[1]);
  const add = [...new Set(foreign)].map((a) => `dpkg --add-architecture ${a} && `).join('');
  return `${add}apt-get update && apt-get install ${packages.join(' ')}`;
}

function headers() {
  try {
    return path.join(path.dirname(execFileSync(process.execPath, ['-p', "require.resolve('node-api-headers/package.json')"], { cwd: root, encoding: 'utf8' }).trim()), 'include');
  } catch {
    throw new Error("node_api.h not found: run 'npm install' in this checkout (the node-api-headers dev dependency provides it)");
  }
}

function run(command, args) {
  const r = spawnSync(command, args, { stdio: ['ignore', 'inherit', 'inherit'] });
  if (r.error) throw new Error(`${command}: ${r.error.message}`);
  if (r.status !== 0) throw new Error(`${[command, ...args].join(' ')} failed (exit ${r.status})`);
}

function readelf(args, file) {
  return execFileSync('readelf', [...args, file], { encoding: 'utf8' });
}

/** Checks a built file is what it should be; throws saying what is wrong. */
function check(file, arch, kind) {
  const header = readelf(['-h'], file);
  if (!header.includes(TARGETS[arch].machine)) throw new Error(`${file} is not built for ${arch}:\n${header}`);
  const dynamic = readelf(['-d'], file);
  const needed = [...dynamic.matchAll(/\(NEEDED\)\s+Shared library: \[([^\]]+)\]/g)].map((m) => m[1]);
  if (kind === 'keeper') {
    if (readelf(['-l'], file).includes('INTERP') || needed.length > 0) throw new Error(`${file} is not static (needs ${needed.join(', ') || 'a dynamic loader'})`);
    return;
  }
  const versions = [...readelf(['--dyn-syms', '-W'], file).matchAll(/@GLIBC_([0-9.]+)/g)].map((m) => m[1]);
  if (kind === 'musl') {
    if (needed.join() !== 'libc.so' || versions.length > 0) throw new Error(`${file} is not a musl addon (NEEDED ${needed.join(', ')}; GLIBC versions ${versions.join(', ')})`);
    return;
  }
  if (needed.join() !== 'libc.so.6') throw new Error(`${file}: NEEDED ${needed.join(', ')}, expected libc.so.6 alone`);
  const newer = versions.filter((v) => compareVersions(v, GLIBC_FLOOR) > 0);
  if (newer.length > 0) throw new Error(`${file} needs GLIBC_${newer.join(', GLIBC_')}, newer than the floor ${GLIBC_FLOOR}`);
}

function compareVersions(a, b) {
  const x = a.split('.').map(Number);
  const y = b.split('.').map(Number);
  for (let i = 0; i < Math.max(x.length, y.length); i++) if ((x[i] ?? 0) !== (y[i] ?? 0)) return (x[i] ?? 0) - (y[i] ?? 0);
  return 0;
}

function build(arch, include) {
  const dir = path.join(OUT, `linux-${arch}`);
  // Built beside, then moved in: a failed build never leaves a half-written file to be shipped.
  const tmp = path.join(OUT, `.tmp-linux-${arch}`);
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  const [gcc, ...gccArgs] = compiler(arch, 'glibc');
  const [muslCc, ...muslArgs] = compiler(arch, 'musl');
  const addon = ['-shared', '-fPIC', `-DNAPI_VERSION=${NAPI_VERSION}`, '-I', include, path.join(NATIVE, 'addon.c')];
  const files = {
    'tether-keeper': [gcc, [...gccArgs, ...CFLAGS, '-static', '-o', path.join(tmp, 'tether-keeper'), path.join(NATIVE, 'keeper.c')], 'keeper'],
    'tether_native.glibc.node': [gcc, [...gccArgs, ...CFLAGS, ...addon.slice(0, -1), '-o', path.join(tmp, 'tether_native.glibc.node'), addon.at(-1)], 'glibc'],
    'tether_native.musl.node': [muslCc, [...muslArgs, ...CFLAGS, ...addon.slice(0, -1), '-o', path.join(tmp, 'tether_native.musl.node'), addon.at(-1)], 'musl'],
  };
  try {
    for (const [name, [command, args, kind]] of Object.entries(files)) {
      run(command, args);
      check(path.join(tmp, name), arch, kind);
      chmodSync(path.join(tmp, name), 0o755);
    }
  } catch (err) {
    rmSync(tmp, { recursive: true, force: true });
    throw err;
  }
  rmSync(dir, { recursive: true, force: true });
  renameSync(tmp, dir);
  log(`linux-${arch}: ${Object.keys(files).join(', ')}`);
}

function main(argv) {
  const unknown = argv.filter((a) => a !== '--host-only');
  if (unknown.length > 0) throw new Error(`unknown argument '${unknown[0]}' (usage: node scripts/prebuild.mjs [--host-only])`);
  if (process.platform !== 'linux') throw new Error(`prebuilds are built on Linux (this is ${process.platform}); elsewhere build from source: npm run build:native`);
  const arches = argv.includes('--host-only') ? [hostArch()] : Object.keys(TARGETS);
  for (const arch of arches) if (!TARGETS[arch]) throw new Error(`no prebuild target for ${arch} (targets: ${Object.keys(TARGETS).join(', ')})`);
  const lacks = [...new Set(arches.flatMap(missing))];
  if (lacks.length > 0) {
    throw new Error(
      `missing toolchains for ${arches.map((a) => `linux-${a}`).join(' and ')}: ${lacks.join(', ')}. Install them (Debian/Ubuntu, as root): ${aptLine(lacks)}` +
        (arches.length > 1 ? ` — or build for this machine only: --host-only` : ''),
    );
  }
  if (!onPath('readelf')) throw new Error('readelf not found (checks what was built): apt-get install binutils');
  const include = headers();
  for (const arch of arches) build(arch, include);
}

try {
  main(process.argv.slice(2));
} catch (err) {
  log(err.message);
  process.exit(1);
}
