/**
 * For the install suites (test/*.install.test.ts, `npm run test:install`): the tarball that
 * `npm run pack` made (test/install-setup.ts), installing it as a user does, a PATH without a
 * compiler, and the tools a suite needs named with what installs them.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants as fsConstants, mkdirSync, mkdtempSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { inject } from 'vitest';

declare module 'vitest' {
  export interface ProvidedContext {
    /** The tarball test/install-setup.ts packed with `node scripts/pack.mjs --out …`. */
    tarball: string;
  }
}

export const run = promisify(execFile);
export const repoRoot = path.resolve(import.meta.dirname, '../..');

export function tarball(): string {
  return inject('tarball');
}

/** npm's own variables from `npm run test:install` would steer the nested npm (prefix, scripts); dropped. */
export const cleanEnv: NodeJS.ProcessEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k) && k !== 'INIT_CWD'));

/** What each tool the suites use comes from (Debian packages). */
const APT: Record<string, string> = {
  'qemu-aarch64': 'qemu-user',
  readelf: 'binutils',
  objdump: 'binutils',
  tar: 'tar',
  'aarch64-linux-gnu-gcc': 'gcc-aarch64-linux-gnu',
  'musl-gcc': 'musl-tools',
  cc: 'gcc',
  make: 'make',
  python3: 'python3',
};

/** The executable file `tool` names on PATH (not a shell builtin), or undefined. */
export function which(tool: string, PATH = process.env.PATH ?? ''): string | undefined {
  for (const dir of PATH.split(':').filter(Boolean)) {
    const file = path.join(dir, tool);
    try {
      accessSync(file, fsConstants.X_OK);
      if (statSync(file).isFile()) return file;
    } catch {
      // not here
    }
  }
  return undefined;
}

/** Throws (the test fails) naming what installs a missing tool: these suites never skip. */
export function requireTools(...tools: string[]): void {
  const missing = tools.filter((t) => !which(t));
  if (missing.length > 0) {
    const packages = [...new Set(missing.map((t) => APT[t] ?? t))];
    throw new Error(`${missing.join(', ')} not found: apt-get install ${packages.join(' ')} (.ci/run installs them)`);
  }
}

/** The tools a user without a C toolchain still has; nothing that compiles. */
const BARE_TOOLS = ['node', 'npm', 'npx', 'sh', 'env', 'echo', 'cat', 'ls', 'rm', 'mkdir', 'cp', 'mv', 'tar', 'gzip', 'head', 'wc', 'grep', 'sed', 'uname', 'sleep', 'true'];
export const COMPILER_TOOLS = ['cc', 'gcc', 'c99', 'clang', 'make', 'python3', 'python', 'node-gyp', 'musl-gcc'];

/** A directory of symlinks to BARE_TOOLS only, to use as the whole PATH. */
export function barePath(dir: string): string {
  mkdirSync(dir, { recursive: true });
  for (const tool of BARE_TOOLS) {
    const found = which(tool);
    if (!found) throw new Error(`${tool} not found on PATH (needed for the no-compiler PATH)`);
    symlinkSync(found, path.join(dir, tool));
  }
  return dir;
}

/** An empty npm project in `dir`. */
export function emptyProject(dir: string): string {
  mkdirSync(dir, { recursive: true });
  writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }));
  return dir;
}

/** `npm install <tarball>` in `dir`; npm's whole output (both streams) for the warnings check. */
export async function npmInstall(dir: string, env: NodeJS.ProcessEnv, ...extra: string[]): Promise<string> {
  const { stdout, stderr } = await run('npm', ['install', tarball(), '--no-audit', '--no-fund', '--prefer-offline', ...extra], { cwd: dir, env, timeout: 240_000 });
  return `${stdout}${stderr}`;
}

/** Resolves with the first line `child` prints on stdout; rejects with its stderr if it exits first. */
export function firstLineOf(child: ChildProcess, what: string): Promise<string> {
  return new Promise((resolve, reject) => {
    let out = '';
    let err = '';
    child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      if (out.includes('\n')) resolve(out.split('\n')[0]!);
    });
    child.once('exit', (code) => reject(new Error(`${what} exited ${code}: ${err}`)));
  });
}

/** `tether serve --port 0` from an installed copy; resolves with its URL (first stdout line). */
export async function startServe(bin: string, env: NodeJS.ProcessEnv, cwd: string): Promise<{ url: string; child: ChildProcess }> {
  // Its own default state dir (issue #27: a server locks it), so several run at once.
  const stateHome = mkdtempSync(path.join(tmpdir(), 'tether-install-state-'));
  const child = spawn(bin, ['serve', '--port', '0'], { cwd, env: { ...env, TETHER_TOKEN: '', XDG_STATE_HOME: stateHome }, stdio: ['ignore', 'pipe', 'pipe'] });
  return { url: await firstLineOf(child, 'tether serve'), child };
}
