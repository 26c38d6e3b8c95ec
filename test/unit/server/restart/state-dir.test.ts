/**
 * The state dir (src/server/restart/state-dir.ts, issue #27): the default path, the checks that
 * refuse a dir another user could reach (mode, symlink, owner), the socket path length, and
 * the lock that keeps two live servers apart.
 */
import { spawn } from 'node:child_process';
import { chmodSync, chownSync, truncateSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync, existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterEach, describe, expect, it } from 'vitest';
import { defaultStateDir, MAX_SOCKET_PATH_BYTES, openStateDir, StateDirError, type StateDir } from '../../../../src/server/restart/state-dir.js';

const dirStat = (uid: number) => () => ({ uid, isDirectory: () => true });
const noStat = () => undefined;

describe('defaultStateDir', () => {
  it('prefers $XDG_STATE_HOME/tether', () => {
    expect(defaultStateDir({ XDG_STATE_HOME: '/s', XDG_RUNTIME_DIR: '/r' }, 1000, '/home/u', dirStat(1000))).toBe('/s/tether');
  });

  it('uses ~/.local/state/tether when HOME is a directory of ours', () => {
    expect(defaultStateDir({ XDG_RUNTIME_DIR: '/r' }, 1000, '/home/u', dirStat(1000))).toBe('/home/u/.local/state/tether');
  });

  it('ignores a relative XDG_STATE_HOME', () => {
    expect(defaultStateDir({ XDG_STATE_HOME: 'rel' }, 1000, '/home/u', dirStat(1000))).toBe('/home/u/.local/state/tether');
  });

  it('skips a HOME that is /nonexistent, missing, or owned by someone else', () => {
    const env = { XDG_RUNTIME_DIR: '/run/user/1000' };
    expect(defaultStateDir(env, 1000, '/nonexistent', dirStat(1000))).toBe('/run/user/1000/tether');
    expect(defaultStateDir(env, 1000, '/home/u', noStat)).toBe('/run/user/1000/tether');
    expect(defaultStateDir(env, 1000, '/home/u', dirStat(0))).toBe('/run/user/1000/tether');
    expect(defaultStateDir(env, 1000, undefined, dirStat(1000))).toBe('/run/user/1000/tether');
  });

  it('falls back to /tmp/tether-<uid>', () => {
    expect(defaultStateDir({}, 1234, '/nonexistent', dirStat(1234))).toBe('/tmp/tether-1234');
  });
});

describe('openStateDir', () => {
  const opened: StateDir[] = [];
  let base = '';
  const fresh = () => (base = mkdtempSync(join(tmpdir(), 'tsd-')));
  afterEach(async () => {
    for (const s of opened.splice(0)) await s.release();
    if (base) rmSync(base, { recursive: true, force: true });
  });
  const open = async (path: string) => {
    const s = await openStateDir(path);
    opened.push(s);
    return s;
  };

  it('creates DIR, DIR/k and DIR/sessions with mode 0700, and names keeper sockets', async () => {
    const dir = join(fresh(), 'a', 'state');
    const s = await open(dir);
    for (const p of [dir, s.keepersPath, s.sessionsPath]) expect(statSync(p).mode & 0o777).toBe(0o700);
    const sock = s.newKeeperSocketPath();
    expect(sock).toMatch(new RegExp(`^${s.keepersPath}/[a-z2-7]{12}\\.sock$`));
    expect(s.newKeeperSocketPath()).not.toBe(sock);
    // A real socket is one; a file or a directory named like one is skipped, and said so.
    const listener = createServer();
    await new Promise<void>((resolve) => listener.listen(sock, resolve));
    const file = join(s.keepersPath, 'aaaaaaaaaaaa.sock');
    const directory = join(s.keepersPath, 'zzzzzzzzzzzz.sock');
    writeFileSync(file, '');
    mkdirSync(directory);
    writeFileSync(join(s.keepersPath, 'other.txt'), '');
    const skipped: string[] = [];
    try {
      expect(await s.keeperSockets((name, why) => skipped.push(`${name}: ${why}`))).toEqual([sock]);
    } finally {
      await new Promise<void>((resolve) => listener.close(() => resolve()));
    }
    expect(skipped).toEqual(['aaaaaaaaaaaa.sock: not a socket', 'zzzzzzzzzzzz.sock: a directory']);
    expect(readFileSync(join(dir, 'server.lock'), 'utf8')).toMatch(new RegExp(`^${process.pid} `));
  });

  it('refuses a dir readable by others, naming the path and the fix', async () => {
    const dir = join(fresh(), 'state');
    mkdirSync(dir, { mode: 0o755 });
    chmodSync(dir, 0o755);
    await expect(openStateDir(dir)).rejects.toThrow(`state dir ${dir} has mode 755, readable or writable by others: run chmod 700 ${dir}`);
  });

  it('refuses a shared dir like /tmp (sticky, writable by all) without telling anyone to chmod it', async () => {
    const dir = join(fresh(), 'shared');
    mkdirSync(dir);
    chmodSync(dir, 0o1777);
    await expect(openStateDir(dir)).rejects.toThrow(
      `state dir ${dir} has mode 1777, shared with other users: give tether a directory of its own, e.g. --state-dir ${join(dir, 'tether-state')} (created mode 0700)`,
    );
    const own = await openStateDir(join(dir, 'tether-state'));
    await own.release();
  });

  it('refuses a subdir with loose modes too', async () => {
    const dir = join(fresh(), 'state');
    mkdirSync(join(dir, 'sessions'), { recursive: true, mode: 0o700 });
    chmodSync(join(dir, 'sessions'), 0o701);
    await expect(openStateDir(dir)).rejects.toThrow(/sessions has mode 701/);
  });

  it('refuses a symbolic link', async () => {
    const real = join(fresh(), 'real');
    mkdirSync(real, { mode: 0o700 });
    symlinkSync(real, join(base, 'link'));
    await expect(openStateDir(join(base, 'link'))).rejects.toThrow(/is a symbolic link/);
    mkdirSync(join(real, 'sessions'), { mode: 0o700 });
    symlinkSync(join(real, 'sessions'), join(real, 'k'));
    await expect(openStateDir(real)).rejects.toThrow(`state dir ${real}/k is a symbolic link`);
  });

  it.runIf(process.geteuid?.() === 0)('refuses a dir owned by another uid (as root)', async () => {
    const dir = join(fresh(), 'state');
    mkdirSync(dir, { mode: 0o700 });
    chownSync(dir, 65534, 65534);
    await expect(openStateDir(dir)).rejects.toThrow(`state dir ${dir} is owned by uid 65534, not by us (uid 0)`);
  });

  it('refuses a path too long for Unix sockets', async () => {
    const dir = join(fresh(), 'x'.repeat(MAX_SOCKET_PATH_BYTES));
    const err = await openStateDir(dir).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StateDirError);
    expect((err as Error).message).toMatch(/^state dir path too long for Unix sockets \(\d+ bytes, at most 107\): .*: use --state-dir with a shorter path$/);
    expect(existsSync(dir)).toBe(false);
    // The longest that fits: DIR + "/k/" + 12 + ".sock" = 107 bytes.
    const fits = join(base, 'y'.repeat(MAX_SOCKET_PATH_BYTES - base.length - 1 - 20));
    await open(fits);
    expect(Buffer.byteLength(fits) + 20).toBe(MAX_SOCKET_PATH_BYTES);
  });

  it('is locked: a second open fails while the first holds it, and succeeds after release', async () => {
    const dir = join(fresh(), 'state');
    const first = await open(dir);
    await expect(openStateDir(dir)).rejects.toThrow(`state dir ${dir} is in use by another tether server (pid ${process.pid})`);
    await first.release();
    expect(existsSync(join(dir, 'server.lock'))).toBe(false);
    const second = await open(dir);
    second.releaseSync();
    expect(existsSync(join(dir, 'server.lock'))).toBe(false);
  });

  it('a huge or foreign lock file is taken as stale (only its first bytes are read)', async () => {
    const dir = fresh();
    const lock = join(dir, 'server.lock');
    writeFileSync(lock, '');
    truncateSync(lock, 64 * 1024 * 1024); // sparse: what matters is that it is never read whole
    const s = await open(dir);
    expect(readFileSync(lock, 'utf8')).toMatch(new RegExp(`^${process.pid} `));
    await s.release();
  });

  it('takes over a stale lock (its pid dead, or reused by another process)', async () => {
    const dir = join(fresh(), 'state');
    mkdirSync(dir, { mode: 0o700 });
    writeFileSync(join(dir, 'server.lock'), '999999999 12345\n');
    await open(dir);
    await opened.pop()!.release();
    // Our own pid, but another start time: the pid was reused, the holder is gone.
    writeFileSync(join(dir, 'server.lock'), `${process.pid} 1\n`);
    await open(dir);
    expect(readFileSync(join(dir, 'server.lock'), 'utf8')).not.toBe(`${process.pid} 1\n`);
    await opened.pop()!.release();
    // Unreadable junk is stale too.
    writeFileSync(join(dir, 'server.lock'), 'garbage');
    await open(dir);
  });

  it('takes over the lock of a zombie (a server killed -9 that nobody reaped: a container whose pid 1 does not reap)', async () => {
    const dir = join(fresh(), 'state');
    mkdirSync(dir, { mode: 0o700 });
    // The subshell outlives the shell's exec into `sleep`, which never reaps it: once it ends,
    // a zombie. (A child that ends at once may be reaped by the shell before its exec.)
    const parent = spawn('sh', ['-c', '(sleep 0.2; exit 0) & echo $!; exec sleep 30'], { stdio: ['ignore', 'pipe', 'ignore'] });
    try {
      const pid = Number(await new Promise<string>((resolve) => createInterface({ input: parent.stdout! }).once('line', resolve)));
      const stat = () => readFileSync(`/proc/${pid}/stat`, 'utf8').slice(readFileSync(`/proc/${pid}/stat`, 'utf8').lastIndexOf(')') + 2).split(' ');
      for (let waited = 0; stat()[0] !== 'Z'; waited += 10) {
        if (waited > 10_000) throw new Error(`pid ${pid} never became a zombie (state ${stat()[0]})`);
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      writeFileSync(join(dir, 'server.lock'), `${pid} ${stat()[19]}\n`);
      await open(dir);
      expect(readFileSync(join(dir, 'server.lock'), 'utf8')).toMatch(new RegExp(`^${process.pid} `));
      await opened.pop()!.release();
    } finally {
      parent.kill('SIGKILL');
    }
  });
});
