/**
 * `tether serve --replace` (restart adoption): a new server takes over the listening socket of the
 * server that runs on the same state dir, with no moment in which a connection is refused
 * (what nginx's binary upgrade does; Node 20 has no `reusePort`, so the descriptor itself is
 * handed over). Over `DIR/admin.sock`:
 *
 *   1. the successor connects (addon `connectReceiveFds`);
 *   2. the predecessor sends one byte carrying its listening descriptor (SCM_RIGHTS, addon
 *      `sendFds`), then stops as on SIGTERM (with a state dir its sessions are kept and its
 *      clients told "restarting"), releasing the state dir, and writes `done\n`;
 *   3. the successor, on `done` (or the predecessor's end), listens on the descriptor and
 *      adopts what the predecessor left.
 *
 * The listening socket never closes: from the moment the byte is sent the successor holds it
 * too, so connections arriving between the predecessor's stop and the successor's listen wait
 * in its backlog; none is refused.
 *
 * Who may ask: Node cannot read SO_PEERCRED, so this relies on file permissions: the state
 * dir must be a directory owned by our euid with no group/other bits (checked on both sides),
 * and the socket is made 0600. Only our own uid (and root) can connect.
 */
import { lstatSync, unlinkSync } from 'node:fs';
import { chmod, mkdir, rename, unlink } from 'node:fs/promises';
import net from 'node:net';
import { dirname, join } from 'node:path';
import type { Logger } from '../../util/logger.js';
import { socketFd } from '../../util/node-internals.js';
import { nativeAddon } from '../native/index.js';

/** The admin socket's name in the state dir. */
export const ADMIN_SOCKET_NAME = 'admin.sock';

/** What the predecessor writes once it has stopped (its state dir released). */
const DONE = 'done\n';

export function adminSocketPath(stateDir: string): string {
  return join(stateDir, ADMIN_SOCKET_NAME);
}

/** A handover that cannot happen; the message says why and what to do. */
export class HandoverError extends Error {
  override name = 'HandoverError';
}

/** The admin socket's directory must be ours alone: a directory we own, no group/other bits. */
export function checkAdminDir(socketPath: string, euid = process.geteuid!()): void {
  const dir = dirname(socketPath);
  let st;
  try {
    st = lstatSync(dir);
  } catch (err) {
    throw new HandoverError(`state dir ${dir}: ${(err as Error).message}`);
  }
  if (!st.isDirectory()) throw new HandoverError(`state dir ${dir} is not a directory (a symlink is refused)`);
  if (st.uid !== euid) throw new HandoverError(`state dir ${dir} belongs to uid ${st.uid}, not to us (${euid}): refused`);
  if ((st.mode & 0o077) !== 0) throw new HandoverError(`state dir ${dir} is open to others (mode ${(st.mode & 0o777).toString(8)}): chmod 700 ${dir}`);
}

/** What the running server offers: its listening descriptor, and its stop. */
export interface HandoverSource {
  listeningFd(): number | null;
  /** Stops the server as on SIGTERM (and closes the admin socket); resolves once stopped. */
  stop(why: string): Promise<void>;
  log: Logger;
}

export interface HandoverOffer {
  /** Stops offering (unlinks the socket). */
  close(): Promise<void>;
}

/**
 * Listens on the admin socket (0600) and hands the listening socket over to the first
 * successor that connects. A stale socket file left by a crashed server is replaced.
 */
export async function offerHandover(socketPath: string, source: HandoverSource): Promise<HandoverOffer> {
  await mkdir(dirname(socketPath), { recursive: true, mode: 0o700 });
  checkAdminDir(socketPath);
  try {
    if (lstatSync(socketPath).isSocket()) unlinkSync(socketPath);
  } catch {
    // absent: fine
  }
  let handing = false;
  const admin = net.createServer((conn) => {
    conn.on('error', () => {});
    if (handing) {
      conn.destroy();
      return;
    }
    const connFd = socketFd(conn);
    const listenFd = source.listeningFd();
    if (connFd === null || listenFd === null) {
      source.log('warn', 'handover asked, but there is no listening socket to hand over');
      conn.destroy();
      return;
    }
    try {
      nativeAddon().sendFds(connFd, [listenFd]);
    } catch (err) {
      source.log('error', `handover: cannot send the listening socket: ${(err as Error).message}`);
      conn.destroy();
      return;
    }
    handing = true;
    source.log('info', 'handing the listening socket over to a successor (tether serve --replace); stopping');
    source.stop('handed over to a successor').then(
      () => conn.end(DONE),
      () => conn.end(DONE),
    );
  });
  // Bound under a temporary name, made 0600, then renamed into place: never reachable with
  // a wider mode (the 0700 directory already keeps others out; the mode says so once more).
  const bound = `${socketPath}.${process.pid}.tmp`;
  await new Promise<void>((resolve, reject) => {
    admin.once('error', reject);
    admin.listen(bound, () => {
      admin.off('error', reject);
      resolve();
    });
  });
  await chmod(bound, 0o600);
  await rename(bound, socketPath);
  source.log('debug', `offering the listening socket to a successor on ${socketPath} (tether serve --replace)`);
  return {
    // Stops accepting at once (the close callback would wait for the successor's connection,
    // which ends only after the stop this is part of) and removes the socket file.
    close: async () => {
      admin.close();
      await unlink(socketPath).catch(() => {});
    },
  };
}

/**
 * The successor's side: connects to the admin socket, receives the listening descriptor, and
 * waits until the predecessor has stopped. Returns the descriptor to listen on.
 */
export async function takeOver(socketPath: string, options: { connectTimeoutMs?: number; stopTimeoutMs?: number } = {}): Promise<number> {
  checkAdminDir(socketPath);
  let received: { socket: number; fds: number[] };
  try {
    received = nativeAddon().connectReceiveFds(socketPath, options.connectTimeoutMs ?? 5000);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ECONNREFUSED') {
      throw new HandoverError(`no server to replace: nothing listens on ${socketPath} (is a server running with this state dir? start it without --replace)`);
    }
    if (code === 'EAGAIN' || code === 'EWOULDBLOCK') throw new HandoverError(`the server on ${socketPath} did not hand over its socket in time`);
    throw new HandoverError(`cannot reach the server to replace on ${socketPath}: ${(err as Error).message}`);
  }
  const addon = nativeAddon();
  if (received.fds.length !== 1) {
    for (const fd of received.fds) addon.closeFd(fd);
    addon.closeFd(received.socket);
    throw new HandoverError(`the server on ${socketPath} handed over ${received.fds.length} descriptors, expected 1 (is it a tether server?)`);
  }
  const listenFd = received.fds[0]!;
  const conn = new net.Socket({ fd: received.socket, readable: true, writable: false });
  await new Promise<void>((resolve, reject) => {
    let said = '';
    const timer = setTimeout(() => {
      conn.destroy();
      addon.closeFd(listenFd);
      reject(new HandoverError(`the server on ${socketPath} handed over its socket but did not stop within ${(options.stopTimeoutMs ?? 15_000) / 1000} s`));
    }, options.stopTimeoutMs ?? 15_000);
    const finish = () => {
      clearTimeout(timer);
      conn.destroy();
      resolve();
    };
    conn.on('data', (d: Buffer) => {
      said += d.toString('latin1');
      if (said.includes(DONE)) finish();
    });
    // The predecessor's end (it exited, or died while stopping) releases the state dir too.
    conn.once('end', finish);
    conn.once('close', finish);
    conn.on('error', () => {});
  });
  return listenFd;
}
