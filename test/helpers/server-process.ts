/**
 * `tether serve` as a separate OS process — so a test can kill it with -9 — optionally as an
 * unprivileged user (`setpriv` to nobody), because as root several isolation checks prove
 * nothing. Also: finding processes by a marker in their argv, across the whole machine.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

const REPO = join(import.meta.dirname, '..', '..');
const BIN = join(REPO, 'bin', 'tether.js');
export const NOBODY = 65534;

/** Who runs the server: the test's own user, or nobody (only possible when the tests run as root). */
export type ServerUser = 'self' | 'nobody';

/** The users a "run as root and as an unprivileged user" test covers here. */
export function serverUsers(): ServerUser[] {
  const root = process.getuid?.() === 0;
  return root && existsSync('/usr/bin/setpriv') ? ['self', 'nobody'] : ['self'];
}

export interface ServerProcess {
  url: string;
  /** The server's pid (setpriv execs node: the same process). */
  pid: number;
  child: ChildProcess;
  /** A directory the server's user owns (HOME and TMPDIR of the server). */
  home: string;
  stderr(): string;
  /** Resolves when the server exited. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Resolves at the first stderr line matching `pattern`. */
  waitForLog(pattern: RegExp, timeoutMs?: number): Promise<string>;
  /** SIGKILLs the server if still running and removes its home. */
  dispose(): Promise<void>;
}

export async function startServerProcess(
  options: { user?: ServerUser; args?: string[]; env?: Record<string, string> } = {},
): Promise<ServerProcess> {
  const user = options.user ?? 'self';
  const home = mkdtempSync(join(tmpdir(), 'tether-srv-'));
  if (user === 'nobody') chownSync(home, NOBODY, NOBODY);
  const extra = options.args ?? [];
  // Today's behaviour unless the test asks for a state dir (issue #27).
  const stateDir = extra.some((a) => a.startsWith('--state-dir')) ? [] : ['--state-dir', 'none'];
  const serveArgs = [BIN, 'serve', '--listen', 'ws://127.0.0.1:0', '--log-level', 'info', ...stateDir, ...extra];
  const [file, args] =
    user === 'nobody'
      ? ['/usr/bin/setpriv', [`--reuid=${NOBODY}`, `--regid=${NOBODY}`, '--clear-groups', process.execPath, ...serveArgs]]
      : [process.execPath, serveArgs];
  const child = spawn(file, args, {
    cwd: REPO,
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: home, TMPDIR: home, ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  const logWaiters = new Set<() => void>();
  child.stderr!.on('data', (d: Buffer) => {
    stderr += d.toString();
    for (const w of [...logWaiters]) w();
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  const url = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout! }).once('line', resolve);
    void exited.then(({ code, signal }) => reject(new Error(`tether serve exited (${code ?? signal}) before printing its URL: ${stderr}`)));
  });
  const waitForLog = (pattern: RegExp, timeoutMs = 10_000) =>
    new Promise<string>((resolve, reject) => {
      const check = () => {
        const line = stderr.split('\n').find((l) => pattern.test(l));
        if (line === undefined) return;
        clearTimeout(timer);
        logWaiters.delete(check);
        resolve(line);
      };
      const timer = setTimeout(() => {
        logWaiters.delete(check);
        reject(new Error(`no log line matching ${pattern} within ${timeoutMs} ms; stderr: ${stderr}`));
      }, timeoutMs);
      logWaiters.add(check);
      check();
    });
  return {
    url,
    pid: child.pid!,
    child,
    home,
    stderr: () => stderr,
    exited,
    waitForLog,
    dispose: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
      rmSync(home, { recursive: true, force: true });
    },
  };
}

/**
 * Pids of live processes whose argv contains `marker` (zombies have no argv any more);
 * with `program`, only those whose argv[0] is that program.
 */
export function processesWithMarker(marker: string, program?: string): number[] {
  const found: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    let cmdline: string;
    try {
      cmdline = readFileSync(`/proc/${entry}/cmdline`, 'latin1');
    } catch {
      continue; // gone meanwhile
    }
    const argv = cmdline.split('\0');
    if (program !== undefined && argv[0] !== program && !argv[0]!.endsWith(`/${program}`)) continue;
    if (argv.some((arg) => arg.includes(marker))) found.push(Number(entry));
  }
  return found;
}

/** Polls until `cond` holds; false if it still does not after `timeoutMs`. */
export async function eventually(cond: () => boolean, timeoutMs: number, intervalMs = 20): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (cond()) return true;
    if (Date.now() >= deadline) return false;
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}
