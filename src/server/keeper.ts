/**
 * The server's side of `tether-keeper` (native/keeper.c), shaped like Node's ChildProcess.
 *
 * Every command runs under its own keeper, a small C program with the command's stdin,
 * stdout and stderr on fds 0-2, a control socket on fd 3 and a start channel on fd 4 (on
 * which the command's child says "pid …" or why it could not start, and whose end of file
 * means exec succeeded — no round trip through the keeper). The keeper receives the command
 * on the control socket, forks it (own session, default signals, nothing but fds 0-2 across
 * exec), adopts every orphaned descendant (child subreaper), and kills the whole tree when
 * told to or when the control socket reaches end of file — which is also what happens when
 * the server dies, however it dies. With a terminal (`tty`), the keeper owns the
 * pseudo-terminal and relays it over its stdin/stdout, so the server never holds a pty
 * descriptor.
 *
 * How keepers are launched (Linux): one long-lived keeper "zygote" keeps an idle keeper
 * forked ahead of need; for each process the server makes five socket pairs and hands the
 * idle keeper its ends over a SOCK_SEQPACKET channel (SCM_RIGHTS). A process/start thus
 * costs the server a few syscalls — no fork of the (large) server, no exec, nothing that
 * blocks its event loop — and one fork, of the command. (Elsewhere each keeper is spawned.)
 *
 * Events: 'exit' (code, signal) when the command ended; 'close' (code, signal) once it ended
 * and its stdout/stderr reached end of file; 'gone' when the keeper itself exited (nothing it
 * started is left).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { Socket } from 'node:net';
import { constants as osConstants } from 'node:os';
import type { Readable, Writable } from 'node:stream';
import { assertKeeperBuilt, keeperPath, nativeAddon } from './native.js';

export interface KeeperSpawnOptions {
  file: string;
  args: string[];
  /** Absolute directory the command runs in (the keeper reports chdir failures apart from exec failures). */
  cwd: string;
  /** The command's whole environment (the keeper itself runs with none). */
  env: Record<string, string>;
  /** argv[0] seen by the command (default: file). */
  argv0?: string;
  /** Run on a pseudo-terminal of this size; stdout then carries the terminal's output and stdin its input. */
  tty?: { cols: number; rows: number };
  /** Without a terminal: give the command a stdin pipe (else /dev/null). */
  stdin: boolean;
  /**
   * How long the keeper may take to pick the start up (until the command is forked) before
   * the start fails with ETIMEDOUT (5 s): a zygote that does not answer (stopped, wedged) is
   * then replaced, and every start waiting on it fails alike, its descriptors released.
   */
  startTimeoutMs?: number;
}

/** The default `startTimeoutMs`: a fork, even on a loaded machine, takes far less. */
export const KEEPER_START_TIMEOUT_MS = 5_000;

/** A start failure: `syscall` is 'chdir' for the working directory, `spawn <file>` for the program. */
export interface KeeperSpawnError extends Error {
  code?: string;
  errno?: number;
  syscall?: string;
  path?: string;
}

type KeptProcessEvents = {
  exit: [code: number | null, signal: NodeJS.Signals | null];
  close: [code: number | null, signal: NodeJS.Signals | null];
  gone: [];
};

const ERRNO_NAMES = new Map<number, string>(Object.entries(osConstants.errno).map(([name, n]) => [n, name]));
const SIGNAL_NAMES = new Map<number, NodeJS.Signals>(
  Object.entries(osConstants.signals).map(([name, n]) => [n, name as NodeJS.Signals]),
);

export class KeptProcess extends EventEmitter<KeptProcessEvents> {
  /** The command's pid (also its process group and session id). */
  pid = 0;
  /** The keeper's pid (known once the command runs). */
  keeperPid = 0;
  private spawnedKeeper: ChildProcess | null = null;
  readonly stdin: Writable | null;
  readonly stdout: Readable;
  readonly stderr: Readable | null;
  /**
   * Where the bytes read from stdout and stderr go (set once; `stdout`/`stderr` emit no
   * 'data'): reading follows their pause()/resume(), end of file their 'end' and 'close'.
   */
  readonly onOutput: (listener: OutputListener) => void;
  exitCode: number | null = null;
  signalCode: NodeJS.Signals | null = null;

  private readonly control: Socket;
  private controlBuffer = '';
  private exited = false;
  private openStreams = 0;
  private closeEmitted = false;
  private keeperRunning = true;
  private starting = true;
  /** 'exit' and 'close' wait until the start is known (see settleStart). */
  private reportsHeld = true;
  private settleStarted!: (err?: Error) => void;
  private startTimer: NodeJS.Timeout | null = null;
  private readonly channels: KeeperChannels;
  /** Resolves once the command runs; rejects if it could not start. */
  readonly started = new Promise<void>((resolve, reject) => {
    this.settleStarted = (err) => (err ? reject(err) : resolve());
  });
  private resolveGone!: () => void;
  /** Resolves when the keeper has exited: the command and everything it started are gone. */
  readonly whenGone = new Promise<void>((resolve) => (this.resolveGone = resolve));

  private constructor(
    channels: KeeperChannels,
    private readonly file: string,
    opts: KeeperSpawnOptions,
  ) {
    super();
    this.channels = channels;
    this.started.catch(() => {}); // the caller awaits it; never an unhandled rejection
    // Keepers get every channel; the ones this command does not use are dropped.
    this.stdin = opts.tty || opts.stdin ? channels.stdin : null;
    this.stdout = channels.stdout;
    this.onOutput = channels.onOutput;
    this.stderr = opts.tty ? null : channels.stderr;
    if (!this.stdin) channels.stdin.destroy();
    if (!this.stderr) channels.stderr.destroy();
    this.control = channels.control;
    this.watchStart(channels.start);
    // A keeper that never picks the start up (its zygote stopped) must not hold it forever.
    const timeoutMs = opts.startTimeoutMs ?? KEEPER_START_TIMEOUT_MS;
    this.startTimer = setTimeout(() => this.startTimedOut(timeoutMs), timeoutMs);
    this.startTimer.unref();
    channels.zygote?.pending.add(this);
    // Errors on these sockets (EPIPE writing to a command that closed its stdin, ECONNRESET)
    // end the stream; what they mean is reported by 'exit'/'close', never by a crash.
    for (const stream of [channels.stdin, channels.stdout, channels.stderr, channels.control, channels.start]) stream.on('error', () => {});
    for (const stream of [this.stdout, this.stderr]) {
      if (!stream) continue;
      this.openStreams++;
      stream.once('close', () => {
        this.openStreams--;
        this.maybeClose();
      });
    }
    this.control.setEncoding('latin1');
    this.control.on('data', (text: string) => this.onControl(text));
    // Only the keeper holds the other end of the control socket: its end of file is the
    // keeper's exit (a keeper spawned directly is also reaped: both, in either order).
    let pending = channels.child ? 2 : 1;
    const gone = () => {
      if (--pending > 0) return;
      this.keeperRunning = false;
      this.resolveGone();
      this.emit('gone');
    };
    this.control.once('close', () => {
      this.onControlClosed();
      gone();
    });
    if (channels.child) {
      this.spawnedKeeper = channels.child;
      channels.child.on('error', () => {}); // kill() of a keeper already reaped
      if (channels.child.pid === undefined) gone(); // never started: no exit to wait for
      else channels.child.once('exit', gone);
    }
  }

  /**
   * Starts a keeper, like child_process.spawn: attach listeners now, then await `started`,
   * which resolves once the command runs (exec succeeded) and rejects with the OS error
   * (`syscall` 'chdir' or `spawn <file>`) otherwise.
   */
  static spawn(opts: KeeperSpawnOptions): KeptProcess {
    const spec = specBlock(opts);
    const channels = launchKeeper(spec);
    const proc = new KeptProcess(channels, opts.file, opts);
    const child = channels.child;
    if (child && child.pid === undefined) {
      child.once('error', (err: KeeperSpawnError) => {
        if (err.code === 'ENOENT' || err.code === 'EACCES') {
          try {
            assertKeeperBuilt();
          } catch (missing) {
            proc.settleStart(missing as Error);
            return;
          }
        }
        proc.settleStart(err);
      });
    } else if (child) {
      proc.control.write(spec);
    }
    return proc;
  }

  /** The keeper still runs: the command, or something it started, is alive. */
  get alive(): boolean {
    return this.keeperRunning;
  }

  /** Sends `signal` to the command's process group (the command itself if it left it). */
  kill(signal: NodeJS.Signals | number = 'SIGTERM'): boolean {
    const number = typeof signal === 'number' ? signal : osConstants.signals[signal];
    if (!number) return false;
    return this.send(`signal ${number}\n`);
  }

  /** Kills the command and every descendant; the keeper reports the exit and ends. */
  killTree(): void {
    this.send('kill\n');
  }

  /**
   * Synchronous last resort (process exit, uncaught exception): SIGTERM to the keeper makes
   * it kill the tree. A server that dies anyway closes the control socket, which does the same.
   */
  killTreeSync(): void {
    if (!this.keeperRunning || !this.keeperPid) return;
    try {
      process.kill(this.keeperPid, 'SIGTERM');
    } catch {
      /* already gone */
    }
  }

  /** Sets the terminal's size (SIGWINCH to its foreground job); no-op without a terminal. */
  resize(cols: number, rows: number): void {
    this.send(`resize ${Math.max(1, cols | 0)} ${Math.max(1, rows | 0)}\n`);
  }

  private send(line: string): boolean {
    if (this.control.destroyed || !this.control.writable) return false;
    this.control.write(line);
    return true;
  }

  private onControl(text: string): void {
    this.controlBuffer += text;
    let nl: number;
    while ((nl = this.controlBuffer.indexOf('\n')) >= 0) {
      const line = this.controlBuffer.slice(0, nl);
      this.controlBuffer = this.controlBuffer.slice(nl + 1);
      const [kind, a = '', b = ''] = line.split(' ');
      if (kind === 'exit') {
        const code = Number(a);
        const signal = Number(b);
        this.onExit(code >= 0 ? code : null, signal > 0 ? (SIGNAL_NAMES.get(signal) ?? 'SIGKILL') : null);
      }
    }
  }

  /** The start channel: "pid P K", maybe "error STAGE ERRNO", then end of file. */
  private watchStart(start: Socket): void {
    let text = '';
    start.setEncoding('latin1');
    start.on('data', (chunk: string) => {
      text += chunk;
      this.pickedUp(); // "pid …": the command is forked, the keeper answered
    });
    start.once('close', () => {
      this.pickedUp();
      let failure: KeeperSpawnError | null = null;
      for (const line of text.split('\n')) {
        const [kind, a = '', b = ''] = line.split(' ');
        if (kind === 'pid') {
          this.pid = Number(a);
          this.keeperPid = Number(b) || this.spawnedKeeper?.pid || 0;
        } else if (kind === 'error') {
          failure ??= this.startError(a, Number(b));
        }
      }
      if (failure) this.settleStart(failure);
      else if (this.pid) this.settleStart();
      else this.settleStart(new Error(`tether-keeper ended before starting ${this.file}`));
    });
  }

  /** The keeper answered (or ended): the start deadline no longer applies. */
  private pickedUp(): void {
    if (this.startTimer) clearTimeout(this.startTimer);
    this.startTimer = null;
    this.channels.zygote?.pending.delete(this);
  }

  /** No answer in time: the zygote is replaced, and this start (and any other waiting on it) fails. */
  private startTimedOut(timeoutMs: number): void {
    this.startTimer = null;
    if (!this.starting) return;
    const zygote = this.channels.zygote;
    const who = zygote ? `the keeper zygote (pid ${zygote.child.pid ?? '?'})` : `tether-keeper (pid ${this.spawnedKeeper?.pid ?? '?'})`;
    const failure = (file: string): KeeperSpawnError =>
      Object.assign(
        new Error(`${who} did not answer within ${timeoutMs} ms (stopped or overloaded); it was replaced: the start of ${file} failed, try again`),
        // Not `spawn <file>`: the program was never tried (a process/start says stage 'setup').
        { code: 'ETIMEDOUT', errno: -(osConstants.errno.ETIMEDOUT ?? 110), syscall: 'keeper' },
      );
    if (zygote) {
      const waiting = [...zygote.pending];
      retireZygote(zygote);
      for (const proc of waiting) proc.abandonStart(failure(proc.file));
    }
    this.abandonStart(failure(this.file));
  }

  /** Fails the start and lets go of every channel (nothing of it runs, nothing is held). */
  private abandonStart(err: KeeperSpawnError): void {
    this.pickedUp();
    if (!this.starting) return;
    this.settleStart(err);
    try {
      this.spawnedKeeper?.kill('SIGKILL');
    } catch {
      /* gone */
    }
    const { stdin, stdout, stderr, control, start } = this.channels;
    for (const socket of [stdin, stdout, stderr, control, start]) socket.destroy();
  }

  private settleStart(err?: Error): void {
    if (!this.starting) return;
    this.starting = false;
    this.pickedUp();
    this.settleStarted(err);
    if (err) return; // as with ChildProcess: a command that never ran reports no exit
    // The channels are read in no fixed order: the exit of a quick command may be known
    // before its start. Report it once whoever awaited `started` has run (and could listen).
    setImmediate(() => {
      this.reportsHeld = false;
      if (this.exited) {
        this.emit('exit', this.exitCode, this.signalCode);
        this.maybeClose();
      }
    });
  }

  private startError(stage: string, errno: number): KeeperSpawnError {
    const code = ERRNO_NAMES.get(errno) ?? `E${errno}`;
    const syscall = stage === 'exec' ? `spawn ${this.file}` : stage;
    const err: KeeperSpawnError = new Error(`${syscall} ${code}`);
    err.code = code;
    err.errno = -errno;
    err.syscall = syscall;
    if (stage === 'exec') err.path = this.file;
    return err;
  }

  /** The keeper stopped talking: it exited (or was killed) — the command cannot report anything more. */
  private onControlClosed(): void {
    // (How the start went is the start channel's to say: it reaches end of file too.)
    if (this.exited || this.pid === 0) return;
    // Killed without reporting (someone SIGKILLed the keeper): nothing watches the command
    // any more. Kill what is left of its group and report it as killed.
    try {
      process.kill(-this.pid, 'SIGKILL');
    } catch {
      /* gone */
    }
    this.onExit(null, 'SIGKILL');
  }

  private onExit(code: number | null, signal: NodeJS.Signals | null): void {
    if (this.exited) return;
    this.exited = true;
    this.exitCode = code;
    this.signalCode = signal;
    if (this.reportsHeld) return;
    this.emit('exit', code, signal);
    this.maybeClose();
  }

  private maybeClose(): void {
    if (this.reportsHeld || !this.exited || this.openStreams > 0 || this.closeEmitted) return;
    this.closeEmitted = true;
    this.emit('close', this.exitCode, this.signalCode);
  }
}

/** The "spec" message (native/keeper.c): NUL-terminated fields, then the environment. */
function specBlock(opts: KeeperSpawnOptions): Buffer {
  const fields = [
    opts.cwd,
    opts.tty ? `${Math.max(1, opts.tty.cols | 0)}x${Math.max(1, opts.tty.rows | 0)}` : '',
    opts.tty || opts.stdin ? '1' : '0',
    opts.argv0 === undefined ? '-' : `+${opts.argv0}`,
    String(1 + opts.args.length),
    opts.file,
    ...opts.args,
  ];
  for (const field of fields) {
    if (field.includes('\0')) throw Object.assign(new TypeError('arguments and the working directory must be strings without null bytes'), { code: 'ERR_INVALID_ARG_VALUE' });
  }
  for (const [name, value] of Object.entries(opts.env)) {
    if (name.includes('\0') || String(value).includes('\0')) {
      throw Object.assign(new TypeError(`The environment variable '${name.replace(/\0/g, '\\0')}' must be a string without null bytes`), {
        code: 'ERR_INVALID_ARG_VALUE',
      });
    }
    fields.push(`${name}=${value}`);
  }
  const body = Buffer.from(fields.map((f) => `${f}\0`).join(''));
  return Buffer.concat([Buffer.from(`spec ${body.length}\n`), body]);
}

/** A keeper's four channels (the server's ends), and the keeper process when spawned directly. */
interface KeeperChannels {
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

/** The zygote (native/keeper.c, --zygote) and the server's end of its SOCK_SEQPACKET channel. */
interface Zygote {
  child: ChildProcess;
  channel: number;
  alive: boolean;
  /** Starts sent through it that no keeper has picked up yet. */
  pending: Set<KeptProcess>;
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
function retireZygote(z: Zygote): void {
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
function launchKeeper(spec: Buffer): KeeperChannels {
  if (launchMode === 'spawn') return spawnKeeper();
  const addon = nativeAddon();
  const pairs: [number, number][] = [];
  let sockets: Socket[] = [];
  let usedZygote: Zygote | undefined;
  let listener: OutputListener = () => {};
  try {
    for (let i = 0; i < 5; i++) pairs.push(addon.socketPair(false));
    const outputSocket = (fd: number, stream: 'stdout' | 'stderr'): Socket =>
      // `onread` is Node's (since 12.2) but missing from @types/node's constructor options.
      new Socket({
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
    sockets = pairs.map(([fd], i) =>
      i === 1 ? outputSocket(fd, 'stdout') : i === 2 ? outputSocket(fd, 'stderr') : new Socket({ fd, readable: i !== 0, writable: i === 0 || i === 3 }),
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
