/**
 * The reference peer: the real Codex exec-server (docs/development.md: npm run test:interop), installed on
 * demand into a cache directory — never a dependency of tether.
 */
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir, homedir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { Target, TargetOptions } from './target.js';

/** The Codex the interop suites run against by default (TETHER_CODEX_VERSION overrides it). */
export const DEFAULT_CODEX_VERSION = '0.169.0';
/** The newest release: its agent can launch an exec-server as a program (environments.toml, stdio). */
export const CODEX_LATEST = '0.171.0';
/** The version of this run: `TETHER_CODEX_VERSION` (e.g. 0.171.0), else the default. */
export const CODEX_VERSION = process.env.TETHER_CODEX_VERSION ?? DEFAULT_CODEX_VERSION;

/** One cache directory per version; TETHER_CODEX_CACHE (a directory of those) moves them all. */
export function codexCacheDir(version: string = CODEX_VERSION): string {
  return join(process.env.TETHER_CODEX_CACHE ?? join(homedir(), '.cache', 'tether'), `codex-${version}`);
}

/** Path of the `codex` binary of `version`, installing `@openai/codex@<version>` into the cache first if needed. */
export function ensureCodexInstalled(version: string = CODEX_VERSION): string {
  const dir = codexCacheDir(version);
  const bin = join(dir, 'node_modules', '.bin', 'codex');
  if (!existsSync(bin)) {
    process.stderr.write(`installing @openai/codex@${version} into ${dir} (once)\n`);
    execFileSync('npm', ['install', '--no-audit', '--no-fund', '--prefix', dir, `@openai/codex@${version}`], {
      stdio: ['ignore', 'ignore', 'inherit'],
    });
  }
  return bin;
}

/** A fresh, empty, writable CODEX_HOME (outside /tmp avoids a harmless warning). */
export function makeCodexHome(): string {
  return mkdtempSync(join(tmpdir(), 'tether-codex-home-'));
}

export interface CodexServer extends Target {
  child: ChildProcess;
}

export async function startCodexServer(options: TargetOptions & { version?: string } = {}): Promise<CodexServer> {
  const bin = ensureCodexInstalled(options.version);
  const home = makeCodexHome();
  const args = ['exec-server', '--listen', `ws://127.0.0.1:${options.port ?? 0}`];
  if (options.token !== undefined) {
    const tokenFile = join(home, 'token');
    writeFileSync(tokenFile, options.token, { mode: 0o600 });
    args.push('--ws-auth', 'capability-token', '--ws-token-file', tokenFile);
  }
  const child = spawn(bin, args, {
    env: { ...process.env, CODEX_HOME: home, RUST_LOG: process.env.RUST_LOG ?? 'error' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stderr!.resume(); // drain; the helper-binary warning is harmless
  const url = await new Promise<string>((resolve, reject) => {
    const lines = createInterface({ input: child.stdout! });
    const timer = setTimeout(() => reject(new Error('codex exec-server did not print its URL within 30 s')), 30_000);
    lines.once('line', (line) => {
      clearTimeout(timer);
      resolve(line.trim());
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`codex exec-server exited early with code ${code}`));
    });
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return {
    kind: 'codex',
    url,
    child,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 3_000);
        await exited;
        clearTimeout(timer);
      }
      rmSync(home, { recursive: true, force: true });
    },
  };
}
