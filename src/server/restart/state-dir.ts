/**
 * The state dir (restart adoption): where a server keeps what a successor needs to adopt its
 * sessions. Layout:
 *
 *     DIR/server.lock            "<pid> <start time>\n" of the server using it (never two at once)
 *     DIR/k/<12 base32>.sock     one listening Unix socket per kept keeper
 *     DIR/sessions/<id>.json     session records (session-store.ts)
 *     DIR/sessions/<id>.keys     idempotency-key journals (session-store.ts)
 *     DIR/quarantine/            what a successor could not read, set aside (0700, made when needed)
 *
 * It is refused (never adopted from) unless DIR, DIR/k and DIR/sessions are real directories
 * (not symlinks) owned by our euid with no group/other permission bits: another user's dir
 * could hand us their keepers, or let them plant sockets we would connect to.
 *
 * The lock is a pid file created with O_EXCL rather than a library: proper-lockfile (the
 * usual choice) decides staleness by mtime, which needs a timer refreshing it and takes
 * seconds to notice a crashed server; a pid (plus its start time, against pid reuse) tells at
 * once whether the holder is alive. Node has no flock(2).
 */
import { randomBytes } from 'node:crypto';
import { closeSync, constants as fsConstants, openSync, readFileSync, readSync, statSync, unlinkSync, writeSync, type Stats } from 'node:fs';
import { lstat, mkdir, readdir, rename, unlink } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { listensOnPort } from './port-holder.js';

/** Longest Unix socket path (sun_path is 108 bytes with the terminating NUL). */
export const MAX_SOCKET_PATH_BYTES = 107;
/** Characters of a keeper socket's name before `.sock`. */
export const KEEPER_NAME_CHARS = 12;
const SOCKET_SUFFIX = `/k/${'x'.repeat(KEEPER_NAME_CHARS)}.sock`;

/**
 * The default state dir, resolved from the environment alone (pure but for `stat`, injectable):
 * `$XDG_STATE_HOME/tether`, else `~/.local/state/tether` when HOME is a directory owned by
 * `uid` (not `/nonexistent`), else `$XDG_RUNTIME_DIR/tether`, else `/tmp/tether-<uid>`.
 * Relative XDG paths are ignored, as the XDG spec says.
 */
export function defaultStateDir(
  env: NodeJS.ProcessEnv,
  uid: number,
  homedir: string | undefined,
  stat: (path: string) => Pick<Stats, 'uid' | 'isDirectory'> | undefined = statOrUndefined,
): string {
  const xdgState = env.XDG_STATE_HOME;
  if (xdgState && xdgState.startsWith('/')) return join(xdgState, 'tether');
  if (homedir && homedir.startsWith('/') && homedir !== '/nonexistent') {
    const st = stat(homedir);
    if (st && st.isDirectory() && st.uid === uid) return join(homedir, '.local', 'state', 'tether');
  }
  const runtime = env.XDG_RUNTIME_DIR;
  if (runtime && runtime.startsWith('/')) return join(runtime, 'tether');
  return `/tmp/tether-${uid}`;
}

function statOrUndefined(path: string): Stats | undefined {
  try {
    return statSync(path);
  } catch {
    return undefined;
  }
}

/** A state dir opened (checked and locked) by this server. */
export interface StateDir {
  /** The state dir itself (absolute). */
  readonly path: string;
  /** DIR/k: the keepers' sockets. */
  readonly keepersPath: string;
  /** DIR/sessions: the session records and key journals. */
  readonly sessionsPath: string;
  /** A fresh keeper socket path, DIR/k/<12 random base32 chars>.sock (not created). */
  newKeeperSocketPath(): string;
  /**
   * The keeper sockets present now (absolute paths, sorted): what a starting server adopts.
   * Anything else in `k/` (a directory or a file named like a socket, a foreign name) is
   * skipped, and told to `skipped` when it is named like a socket.
   */
  keeperSockets(skipped?: (name: string, why: string) => void): Promise<string[]>;
  /** Moves `path` (in this state dir) into DIR/quarantine/ under a fresh name; resolves with the new path. */
  quarantine(path: string): Promise<string>;
  /** Lets go of the lock (idempotent). The directory and its contents stay. */
  release(): Promise<void>;
  /** The same, synchronously (for a process 'exit' handler). */
  releaseSync(): void;
}

/** Why a state dir was refused: the message names the path and the fix. */
export class StateDirError extends Error {
  override name = 'StateDirError';
}

export interface OpenStateDirOptions {
  /** Our effective uid (default process.geteuid()); injectable for tests. */
  euid?: number;
  /** The TCP port this server is to listen on: a refusal says when the lock's holder listens on it too. */
  port?: number;
}

/**
 * Creates (mode 0700) and checks DIR, DIR/k and DIR/sessions, checks socket paths fit, and
 * locks DIR/server.lock. Throws a StateDirError when any of that is refused.
 */
export async function openStateDir(path: string, options: OpenStateDirOptions = {}): Promise<StateDir> {
  if (!path.startsWith('/')) throw new StateDirError(`state dir ${JSON.stringify(path)} must be an absolute path`);
  const euid = options.euid ?? process.geteuid!();
  const socketBytes = Buffer.byteLength(path) + Buffer.byteLength(SOCKET_SUFFIX);
  if (socketBytes > MAX_SOCKET_PATH_BYTES) {
    throw new StateDirError(
      `state dir path too long for Unix sockets (${socketBytes} bytes, at most ${MAX_SOCKET_PATH_BYTES}): ${path}: use --state-dir with a shorter path`,
    );
  }
  const keepersPath = join(path, 'k');
  const sessionsPath = join(path, 'sessions');
  // Parents we create get 0700 too; existing ones are left as they are (only DIR is ours).
  await mkdir(path, { recursive: true, mode: 0o700 });
  await checkOwnDir(path, euid);
  for (const sub of [keepersPath, sessionsPath]) {
    await mkdir(sub, { mode: 0o700 }).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'EEXIST') throw err;
    });
    await checkOwnDir(sub, euid);
  }
  const lockPath = join(path, 'server.lock');
  await takeLock(lockPath, options.port);
  let released = false;
  const releaseSync = (): void => {
    if (released) return;
    released = true;
    // Only our own lock: never remove one a successor took after a takeover.
    if (readLock(lockPath)?.pid === process.pid) {
      try {
        unlinkSync(lockPath);
      } catch {
        // already gone
      }
    }
  };
  return {
    path,
    keepersPath,
    sessionsPath,
    newKeeperSocketPath: () => join(keepersPath, `${randomBase32(KEEPER_NAME_CHARS)}.sock`),
    keeperSockets: async (skipped) => {
      const sockets: string[] = [];
      for (const name of (await readdir(keepersPath)).sort()) {
        if (!/^[a-z2-7]{12}\.sock$/.test(name)) continue;
        const st = await lstat(join(keepersPath, name)).catch(() => null);
        if (st?.isSocket()) sockets.push(join(keepersPath, name));
        else if (st) skipped?.(name, st.isDirectory() ? 'a directory' : st.isSymbolicLink() ? 'a symbolic link' : 'not a socket');
      }
      return sockets;
    },
    quarantine: async (from) => {
      const dir = join(path, 'quarantine');
      await mkdir(dir, { mode: 0o700 }).catch((err: NodeJS.ErrnoException) => {
        if (err.code !== 'EEXIST') throw err;
      });
      await checkOwnDir(dir, euid);
      const to = join(dir, `${basename(from)}.${Date.now()}-${randomBase32(4)}`);
      await rename(from, to);
      return to;
    },
    release: async () => releaseSync(),
    releaseSync,
  };
}

/** A directory (not a symlink) owned by `euid` with no group/other bits, or a StateDirError. */
async function checkOwnDir(path: string, euid: number): Promise<void> {
  const st = await lstat(path);
  if (st.isSymbolicLink()) throw new StateDirError(`state dir ${path} is a symbolic link: remove it, or use --state-dir with a real directory`);
  if (!st.isDirectory()) throw new StateDirError(`state dir ${path} is not a directory: remove it, or use --state-dir with another path`);
  if (st.uid !== euid) {
    throw new StateDirError(`state dir ${path} is owned by uid ${st.uid}, not by us (uid ${euid}): use --state-dir with a directory of our own`);
  }
  if ((st.mode & 0o077) !== 0) {
    const mode = (st.mode & 0o7777).toString(8).padStart(3, '0');
    // A shared directory (/tmp: sticky or writable by all) is not to be chmod'ed: a subdirectory is the fix.
    if ((st.mode & 0o1002) !== 0) {
      throw new StateDirError(`state dir ${path} has mode ${mode}, shared with other users: give tether a directory of its own, e.g. --state-dir ${join(path, 'tether-state')} (created mode 0700)`);
    }
    throw new StateDirError(`state dir ${path} has mode ${mode}, readable or writable by others: run chmod 700 ${path}`);
  }
}

interface LockHolder {
  pid: number;
  /** The holder's start time (/proc/<pid>/stat field 22), null where unknown. */
  start: string | null;
}

async function takeLock(lockPath: string, port: number | undefined): Promise<void> {
  for (let attempt = 0; attempt < 5; attempt++) {
    if (createLock(lockPath)) return;
    const holder = readLock(lockPath);
    if (holder === undefined) continue; // gone meanwhile: try again
    if (holder !== null && holderAlive(holder)) throw inUse(lockPath.slice(0, -'/server.lock'.length), holder.pid, port);
    // Stale (its server died) or unreadable: move it aside, and remove it only if it is still
    // the stale one (a racing server may have replaced it meanwhile: then put that one back).
    const aside = `${lockPath}.stale-${process.pid}-${randomBase32(6)}`;
    try {
      await rename(lockPath, aside);
    } catch {
      continue;
    }
    const movedHolder = readLock(aside) ?? null;
    if (movedHolder !== null && holderAlive(movedHolder)) {
      await rename(aside, lockPath).catch(() => {});
      continue;
    }
    await unlink(aside).catch(() => {});
  }
  throw new StateDirError(`could not lock ${lockPath} (other servers are starting on it at the same time): try again`);
}

/**
 * The refusal when a live server holds the lock. When it listens on our port too (a second
 * `tether serve` on the same port: the default state dir is per port), the port is what
 * conflicts, and another state dir alone would only end in EADDRINUSE: both are named.
 */
function inUse(dir: string, pid: number, port: number | undefined): StateDirError {
  if (port !== undefined && port !== 0 && listensOnPort(pid, port)) {
    return new StateDirError(
      `port ${port} and state dir ${dir} are in use by another tether server (pid ${pid}): to take over from it, add --replace; ` +
        `to run a second server beside it, give another --port (or --listen) and another --state-dir`,
    );
  }
  return new StateDirError(
    `state dir ${dir} is in use by another tether server (pid ${pid}): stop it, take over from it with --replace, or use --state-dir with another directory`,
  );
}

/** Creates the lock file with our pid (O_EXCL); false if it exists. */
function createLock(lockPath: string): boolean {
  let fd: number;
  try {
    fd = openSync(lockPath, 'wx', 0o600);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw err;
  }
  try {
    writeSync(fd, `${process.pid} ${processStat(process.pid)?.start ?? '-'}\n`);
  } finally {
    closeSync(fd);
  }
  return true;
}

/** Longest lock file read: "<pid> <start time>\n" is a few dozen bytes; a bigger one is no lock of ours. */
const LOCK_MAX_BYTES = 128;

/** The lock's holder; null if the file is unreadable as a lock; undefined if there is no file. */
function readLock(lockPath: string): LockHolder | null | undefined {
  let fd: number;
  try {
    fd = openSync(lockPath, fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW | fsConstants.O_NONBLOCK);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ENOENT' ? undefined : null;
  }
  try {
    // Never more than the bound, whatever the file holds (a lock edited into a huge file).
    const buffer = Buffer.alloc(LOCK_MAX_BYTES + 1);
    const length = readSync(fd, buffer, 0, buffer.length, 0);
    return length > LOCK_MAX_BYTES ? null : parseLock(buffer.toString('utf8', 0, length));
  } catch {
    return null;
  } finally {
    closeSync(fd);
  }
}

function parseLock(text: string): LockHolder | null {
  const m = /^(\d+) (\S+)\n?$/.exec(text);
  if (!m) return null;
  return { pid: Number(m[1]), start: m[2] === '-' ? null : m[2]! };
}

/** The process exists (signal 0 reaches it, or EPERM: it exists but is not ours) and is the same one (start time). */
function holderAlive(holder: LockHolder): boolean {
  if (holder.pid <= 0) return false;
  try {
    process.kill(holder.pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  const stat = processStat(holder.pid);
  // A zombie is dead: killed, not yet reaped (a container whose pid 1 does not reap keeps it so).
  if (stat?.state === 'Z') return false;
  const start = stat?.start ?? null;
  return holder.start === null || start === null || start === holder.start;
}

/** Linux: a process's state (R, S, Z…) and start time in clock ticks since boot (pid reuse changes it); null elsewhere. */
function processStat(pid: number): { state: string; start: string | null } | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return { state: fields[0] ?? '', start: fields[19] ?? null }; // state is field 3 overall, the start time field 22
  } catch {
    return null;
  }
}

const BASE32 = 'abcdefghijklmnopqrstuvwxyz234567';

function randomBase32(chars: number): string {
  const bytes = randomBytes(chars);
  let out = '';
  for (let i = 0; i < chars; i++) out += BASE32[bytes[i]! & 31];
  return out;
}
