/**
 * The server's side of `tether-keeper` (native/keeper.c), shaped like Node's ChildProcess.
 *
 * Every command runs under its own keeper: a small C program the server spawns with the
 * command's pipes on fds 0-2 and a control socket on fd 3. The keeper forks the command
 * (own session, default signals, nothing but fds 0-2 across exec), adopts every orphaned
 * descendant (child subreaper), and kills the whole tree when told to or when the control
 * socket reaches end of file — which is also what happens when the server dies, however it
 * dies. With a terminal (`tty`), the keeper owns the pseudo-terminal and relays it over its
 * stdin/stdout, so the server never holds a pty descriptor.
 *
 * Events: 'exit' (code, signal) when the command ended; 'close' (code, signal) once it ended
 * and its stdout/stderr reached end of file; 'gone' when the keeper itself exited (nothing it
 * started is left).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { accessSync, constants as fsConstants } from 'node:fs';
import { constants as osConstants } from 'node:os';
import type { Readable, Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';

/** Built at install by `node-gyp rebuild` in native/ (see binding.gyp). */
export const KEEPER_PATH = fileURLToPath(new URL('../../native/build/Release/tether-keeper', import.meta.url));

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
}

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

/** Throws a clear error when the native part was not built (instead of failing every process/start). */
export function assertKeeperBuilt(): void {
  try {
    accessSync(KEEPER_PATH, fsConstants.X_OK);
  } catch {
    throw new Error(
      `tether's native keeper is not built (${KEEPER_PATH} is missing): it is compiled at install; ` +
        'run `npm rebuild` in the package (needs a C compiler, make and python3, as node-gyp does)',
    );
  }
}

export class KeptProcess extends EventEmitter<KeptProcessEvents> {
  /** The command's pid (also its process group and session id). */
  pid = 0;
  readonly keeperPid: number;
  readonly stdin: Writable | null;
  readonly stdout: Readable;
  readonly stderr: Readable | null;
  exitCode: number | null = null;
  signalCode: NodeJS.Signals | null = null;

  private readonly control: import('node:net').Socket;
  private controlBuffer = '';
  private exited = false;
  private openStreams = 0;
  private closeEmitted = false;
  private keeperRunning = true;
  private starting = true;
  private settleStarted!: (err?: Error) => void;
  /** Resolves once the command runs; rejects if it could not start. */
  readonly started = new Promise<void>((resolve, reject) => {
    this.settleStarted = (err) => (err ? reject(err) : resolve());
  });
  private resolveGone!: () => void;
  /** Resolves when the keeper has exited: the command and everything it started are gone. */
  readonly whenGone = new Promise<void>((resolve) => (this.resolveGone = resolve));

  private constructor(
    private readonly child: ChildProcess,
    private readonly file: string,
  ) {
    super();
    this.started.catch(() => {}); // the caller awaits it; never an unhandled rejection
    this.keeperPid = child.pid ?? 0;
    this.stdin = child.stdin;
    this.stdout = child.stdout!;
    this.stderr = child.stderr;
    this.control = child.stdio[3] as import('node:net').Socket;
    // Errors on these sockets (EPIPE writing to a command that closed its stdin, ECONNRESET)
    // end the stream; what they mean is reported by 'exit'/'close', never by a crash.
    for (const stream of [this.stdin, this.stdout, this.stderr, this.control]) stream?.on('error', () => {});
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
    // The keeper's exit can be seen before the last control lines are read: what it reported
    // counts once the control socket reached end of file, and it is gone when both happened.
    let pending = 2;
    const gone = () => {
      if (--pending > 0) return;
      this.resolveGone();
      this.emit('gone');
    };
    this.control.once('close', () => {
      this.onControlClosed();
      gone();
    });
    child.once('exit', () => {
      this.keeperRunning = false;
      gone();
    });
  }

  /**
   * Starts the keeper, like child_process.spawn: attach listeners now, then await `started`,
   * which resolves once the command runs (exec succeeded) and rejects with the OS error
   * (`syscall` 'chdir' or `spawn <file>`) otherwise.
   */
  static spawn(opts: KeeperSpawnOptions): KeptProcess {
    const args = ['--cwd', opts.cwd];
    if (opts.argv0 !== undefined) args.push('--arg0', opts.argv0);
    if (opts.tty) args.push('--tty', `${Math.max(1, opts.tty.cols | 0)}x${Math.max(1, opts.tty.rows | 0)}`);
    args.push('--', opts.file, ...opts.args);
    const env = environmentBlock(opts.env);
    const child = spawn(KEEPER_PATH, args, {
      // The keeper leads its own session: a terminal's signals to the server's group miss it.
      detached: true,
      cwd: '/',
      env: {},
      stdio: [opts.tty || opts.stdin ? 'pipe' : 'ignore', 'pipe', opts.tty ? 'ignore' : 'pipe', 'pipe'],
    });
    const proc = new KeptProcess(child, opts.file);
    if (child.pid === undefined) {
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
    } else {
      child.on('error', () => {}); // kill() of a reaped keeper
      proc.control.write(Buffer.concat([Buffer.from(`env ${env.length}\n`), env]));
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
    if (!this.keeperRunning) return;
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
      if (kind === 'pid') {
        this.pid = Number(a);
        this.settleStart();
      } else if (kind === 'error') {
        this.settleStart(this.startError(a, Number(b)));
      } else if (kind === 'exit') {
        const code = Number(a);
        const signal = Number(b);
        this.onExit(code >= 0 ? code : null, signal > 0 ? (SIGNAL_NAMES.get(signal) ?? 'SIGKILL') : null);
      }
    }
  }

  private settleStart(err?: Error): void {
    if (!this.starting) return;
    this.starting = false;
    this.settleStarted(err);
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
    if (this.starting) {
      this.settleStart(new Error(`tether-keeper ended before starting ${this.file}`));
      return;
    }
    if (this.exited || this.pid === 0) return;
    // Killed without reporting (someone SIGKILLed the keeper): nothing watches the command
    // any more. Kill what is left of its group and report it as killed.
    try {
      process.kill(-this.pid, 'SIGKILL');
    } catch {
      /* gone */
    }
    this.onExit(null, this.child.signalCode ?? 'SIGKILL');
  }

  private onExit(code: number | null, signal: NodeJS.Signals | null): void {
    if (this.exited) return;
    this.exited = true;
    this.exitCode = code;
    this.signalCode = signal;
    this.emit('exit', code, signal);
    this.maybeClose();
  }

  private maybeClose(): void {
    if (!this.exited || this.openStreams > 0 || this.closeEmitted) return;
    this.closeEmitted = true;
    this.emit('close', this.exitCode, this.signalCode);
  }
}

/** NAME=VALUE entries, each NUL-terminated, as the keeper reads them from its control socket. */
function environmentBlock(env: Record<string, string>): Buffer {
  const parts: string[] = [];
  for (const [name, value] of Object.entries(env)) {
    if (name.includes('\0') || String(value).includes('\0')) {
      throw Object.assign(new TypeError(`The environment variable '${name.replace(/\0/g, '\\0')}' must be a string without null bytes`), {
        code: 'ERR_INVALID_ARG_VALUE',
      });
    }
    parts.push(`${name}=${value}\0`);
  }
  return Buffer.from(parts.join(''));
}
