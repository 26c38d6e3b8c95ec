/**
 * Launching a `tether-keeper` for one process, its channels ready (the server's ends).
 *
 * Linux: one long-lived keeper "zygote" keeps an idle keeper forked ahead of need; for each
 * process the server makes five socket pairs and hands the idle keeper its ends over a
 * SOCK_SEQPACKET channel (SCM_RIGHTS). A process/start thus costs the server a few syscalls —
 * no fork of the (large) server, no exec, nothing that blocks its event loop — and one fork,
 * of the command. Elsewhere (or with TETHER_KEEPER_LAUNCH=spawn) each keeper is spawned.
 * What goes over the channels is wire.ts; one keeper's lifecycle is keeper.ts.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { Socket } from 'node:net';
import type { KeeperSpawnError } from './wire.js';
import { keeperPath, nativeAddon } from '../../native/index.js';

/** A keeper's five channels (the server's ends), and the keeper process when spawned directly. */
export interface KeeperChannels {
  stdin: Socket;
  stdout: Socket;
  stderr: Socket;
  control: Socket;
  start: Socket;
  child?: ChildProcess;
  /** The zygote it was sent through (launched that way). */
  zygote?: Zygote;
  /** Where the bytes read from stdout and stderr go (set once). */
  onOutput(listener: OutputListener): void;
}

/** Bytes read from the command's stdout or stderr: `data` is valid only during the call. */
export type OutputListener = (stream: 'stdout' | 'stderr', data: Buffer) => void;

/**
 * One read buffer for every command's output: each read is handed to its listener (which
 * copies what it keeps) before the next read starts, so no read allocates a Buffer. Larger
 * than Node's 64 KiB: a fast producer is read in fewer, larger pieces (fewer reads, frames
 * and events per byte); a socket pair holds that much.
 */
const OUTPUT_READ_BUFFER = Buffer.allocUnsafeSlow(256 * 1024);

/** A socket reading one output stream into the shared read buffer (no Buffer allocated per read). */
function outputSocket(fd: number, stream: 'stdout' | 'stderr', listener: OutputListener): Socket {
  // `onread` is Node's (since 12.2) but missing from @types/node's constructor options.
  return new Socket({
    fd,
    readable: true,
    writable: false,
    onread: {
      buffer: OUTPUT_READ_BUFFER,
      callback: (bytes: number, buffer: Uint8Array) => {
        listener(stream, Buffer.from(buffer.buffer, buffer.byteOffset, bytes));
        return true;
      },
    },
  } as ConstructorParameters<typeof Socket>[0]);
}

/**
 * The channels of an adopted kept keeper (restart adoption): the control socket and the three fds it
 * passed (stdin, stdout, stderr), wrapped as a launched keeper's are. No start channel: the
 * command runs already.
 */
export function adoptedChannels(control: Socket, fds: { stdin: number; stdout: number; stderr: number }): Omit<KeeperChannels, 'start'> {
  let listener: OutputListener = () => {};
  const forward: OutputListener = (stream, data) => listener(stream, data);
  return {
    control,
    stdin: new Socket({ fd: fds.stdin, readable: false, writable: true }),
    stdout: outputSocket(fds.stdout, 'stdout', forward),
    stderr: outputSocket(fds.stderr, 'stderr', forward),
    onOutput: (l) => (listener = l),
  };
}

/** A start sent through the zygote that no keeper has picked up yet (keeper.ts's KeptProcess). */
export interface PendingStart {
  /** The zygote was retired for not answering: the start fails with what `failure` says of its command. */
  zygoteRetired(failure: (file: string) => KeeperSpawnError): void;
}

/** The zygote (native/keeper.c, --zygote) and the server's end of its SOCK_SEQPACKET channel. */
export interface Zygote {
  child: ChildProcess;
  channel: number;
  alive: boolean;
  /** Starts sent through it that no keeper has picked up yet. */
  pending: Set<PendingStart>;
  /** Closes the server's end of the channel; it is no longer the zygote in use. */
  dead(): void;
}

let zygote: Zygote | null = null;
let launchMode: 'zygote' | 'spawn' =
  process.env.TETHER_KEEPER_LAUNCH === 'spawn' || process.platform !== 'linux' ? 'spawn' : 'zygote';

/** Room in the zygote's argv for each keeper to show its command in `ps`. */
const TITLE_ROOM = 200;

/** How keepers are launched (tests cover both; the server uses the zygote on Linux). Returns the previous way. */
export function setKeeperLaunch(mode: 'zygote' | 'spawn'): 'zygote' | 'spawn' {
  const previous = launchMode;
  launchMode = mode;
  return previous;
}

/** Starts the zygote ahead of the first process/start (at server start). */
export function prepareKeepers(): void {
  if (launchMode === 'zygote' && !zygote) zygote = startZygote();
}

function startZygote(): Zygote {
  const addon = nativeAddon();
  const [channel, keeperEnd] = addon.socketPair(true);
  let child: ChildProcess;
  try {
    child = spawn(keeperPath(), ['--zygote', ' '.repeat(TITLE_ROOM)], {
      detached: true,
      cwd: '/',
      env: {},
      stdio: ['ignore', 'ignore', 'ignore', keeperEnd],
    });
  } catch (err) {
    addon.closeFd(channel);
    throw err;
  } finally {
    addon.closeFd(keeperEnd);
  }
  const dead = () => {
    if (!z.alive) return;
    z.alive = false;
    addon.closeFd(channel); // an idle keeper still waiting sees end of file and exits
    if (zygote === z) zygote = null;
  };
  const z: Zygote = { child, channel, alive: true, pending: new Set(), dead };
  child.once('exit', dead);
  child.once('error', dead);
  child.unref(); // it lives as long as the server process, never keeps it alive
  return z;
}

/**
 * Replaces a zygote that does not answer: kills it and its idle keeper (its process group; a
 * keeper that took a start leads its own session and is untouched), which drops the records
 * still queued on the channel and with them the descriptors they carry. The next start forks
 * a new zygote.
 */
export function retireZygote(z: Zygote): void {
  if (z.child.pid !== undefined) {
    try {
      process.kill(-z.child.pid, 'SIGKILL');
    } catch {
      /* gone */
    }
  }
  z.dead();
}

/**
 * A keeper for one process, its channels ready. Through the zygote, `spec` is already queued
 * on the control socket when the idle keeper receives it (it starts at once); a spawned keeper
 * is sent it by the caller once the spawn is known to have worked.
 */
export function launchKeeper(spec: Buffer): KeeperChannels {
  if (launchMode === 'spawn') return spawnKeeper();
  const addon = nativeAddon();
  const pairs: [number, number][] = [];
  let sockets: Socket[] = [];
  let usedZygote: Zygote | undefined;
  let listener: OutputListener = () => {};
  try {
    for (let i = 0; i < 5; i++) pairs.push(addon.socketPair(false));
    const outputListener: OutputListener = (stream, data) => listener(stream, data);
    sockets = pairs.map(([fd], i) =>
      i === 1
        ? outputSocket(fd, 'stdout', outputListener)
        : i === 2
          ? outputSocket(fd, 'stderr', outputListener)
          : new Socket({ fd, readable: i !== 0, writable: i === 0 || i === 3 }),
    );
    sockets[3]!.write(spec);
    const keeperEnds = pairs.map(([, keeperEnd]) => keeperEnd);
    try {
      if (!zygote?.alive) zygote = startZygote();
      addon.sendFds(zygote.channel, keeperEnds);
    } catch {
      // The zygote died (EPIPE, ECONNREFUSED): one more, once.
      zygote = startZygote();
      addon.sendFds(zygote.channel, keeperEnds);
    }
    usedZygote = zygote;
  } catch (err) {
    for (const socket of sockets) socket.destroy();
    for (const [serverEnd, keeperEnd] of pairs) {
      if (sockets.length === 0) addon.closeFd(serverEnd);
      addon.closeFd(keeperEnd);
    }
    throw err;
  }
  for (const [, keeperEnd] of pairs) addon.closeFd(keeperEnd);
  const [stdin, stdout, stderr, control, start] = sockets as [Socket, Socket, Socket, Socket, Socket];
  return { stdin, stdout, stderr, control, start, zygote: usedZygote, onOutput: (l) => (listener = l) };
}

function spawnKeeper(): KeeperChannels {
  const child = spawn(keeperPath(), [], {
    // The keeper leads its own session: a terminal's signals to the server's group miss it.
    detached: true,
    cwd: '/',
    env: {},
    stdio: ['pipe', 'pipe', 'pipe', 'pipe', 'pipe'],
  });
  return {
    stdin: child.stdin as Socket,
    stdout: child.stdout as Socket,
    stderr: child.stderr as Socket,
    control: child.stdio[3] as Socket,
    start: child.stdio[4] as Socket,
    child,
    onOutput: (listener) => {
      child.stdout!.on('data', (data: Buffer) => listener('stdout', data));
      child.stderr!.on('data', (data: Buffer) => listener('stderr', data));
    },
  };
}
