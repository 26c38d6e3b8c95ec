/**
 * `tether serve` as a separate OS process — so a test can kill it with -9 — optionally as an
 * unprivileged user (`setpriv` to nobody), because as root several isolation checks prove
 * nothing. Also: finding processes by a marker in their argv, across the whole machine.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
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
  /** The loopback port it listens on (a successor passes it as `port`). */
  port: number;
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

export interface ServerProcessOptions {
  user?: ServerUser;
  args?: string[];
  env?: Record<string, string>;
  /** Listen on this loopback port (default 0: any free port). A successor passes its predecessor's. */
  port?: number;
  /** `--state-dir` (a path, or 'none'); absent: 'none' unless `args` has a --state-dir. */
  stateDir?: string;
}

export async function startServerProcess(options: ServerProcessOptions = {}): Promise<ServerProcess> {
  const user = options.user ?? 'self';
  const home = mkdtempSync(join(tmpdir(), 'tether-srv-'));
  if (user === 'nobody') chownSync(home, NOBODY, NOBODY);
  const extra = options.args ?? [];
  // Today's behaviour (--state-dir none) unless the test asks for a state dir (issue #27).
  const askedStateDir = options.stateDir !== undefined || extra.some((a) => a.startsWith('--state-dir'));
  const stateArgs = options.stateDir !== undefined ? ['--state-dir', options.stateDir] : askedStateDir ? [] : ['--state-dir', 'none'];
  const listen = `ws://127.0.0.1:${options.port ?? 0}`;
  const serveArgs = [BIN, 'serve', '--listen', listen, '--log-level', 'info', ...stateArgs, ...extra];
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
  let started = false;
  const url = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout! }).once('line', (line) => {
      started = true;
      resolve(line);
    });
    void exited.then(({ code, signal }) => {
      if (started) return;
      rmSync(home, { recursive: true, force: true }); // nobody will dispose() a server that never started
      reject(new Error(`tether serve exited (${code ?? signal}) before printing its URL: ${stderr}`));
    });
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
    port: Number(new URL(url).port),
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

/** A loopback TCP port free right now (a server started soon after binds it; a successor reuses it). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
  });
}

/** A fresh state directory for `tether serve --state-dir`, owned by `user`, mode 0700 (issue #27). */
export function makeStateDir(user: ServerUser): string {
  const dir = mkdtempSync(join(tmpdir(), 'tether-st-'));
  chmodSync(dir, 0o700);
  if (user === 'nobody') chownSync(dir, NOBODY, NOBODY);
  return dir;
}

/** Socket files left in a state dir's `k/` (one per kept keeper). */
export function keeperSocketFiles(stateDir: string): string[] {
  try {
    return readdirSync(join(stateDir, 'k')).filter((name) => name.endsWith('.sock'));
  } catch {
    return [];
  }
}

/**
 * Pids of the processes that hold a listening Unix socket bound under `stateDir`/k: the
 * kept keepers (found through /proc/net/unix inodes and /proc/PID/fd, whatever their argv).
 */
export function keeperPids(stateDir: string): number[] {
  const prefix = join(stateDir, 'k') + '/';
  const inodes = new Set<string>();
  for (const line of readFileSync('/proc/net/unix', 'utf8').split('\n').slice(1)) {
    const cols = line.trim().split(/\s+/);
    // Num RefCount Protocol Flags Type St Inode [Path]; St 01 = listening (unconnected).
    if (cols.length >= 8 && cols[7]!.startsWith(prefix)) inodes.add(cols[6]!);
  }
  if (inodes.size === 0) return [];
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${entry}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      let target: string;
      try {
        target = readlinkSync(`/proc/${entry}/fd/${fd}`);
      } catch {
        continue;
      }
      const m = /^socket:\[(\d+)\]$/.exec(target);
      if (m && inodes.has(m[1]!)) {
        pids.push(Number(entry));
        break;
      }
    }
  }
  return pids;
}

/**
 * Test cleanup for a state dir: SIGTERM every keeper still listening there (a kept keeper
 * kills its tree on SIGTERM), wait until they are gone, remove the dir.
 */
export async function disposeStateDir(stateDir: string): Promise<void> {
  for (const pid of keeperPids(stateDir)) {
    try {
      process.kill(pid, 'SIGTERM');
    } catch {
      // gone meanwhile
    }
  }
  await eventually(() => keeperPids(stateDir).length === 0, 5_000);
  rmSync(stateDir, { recursive: true, force: true });
}

/**
 * Whether `pid` is a live process: not gone and not a zombie (a dead keeper reparented to a
 * pid 1 that does not reap — as in some containers — stays a zombie, and kill(pid, 0) still
 * succeeds on it).
 */
export function isLive(pid: number): boolean {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
  } catch {
    return false;
  }
  // pid (comm) state …: comm may hold spaces and parentheses, the state follows the last ')'.
  const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
  return state !== 'Z' && state !== 'X';
}
