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
 * How keepers are launched (a zygote on Linux) is launch.ts; what is said over the
 * control socket and the start channel is wire.ts.
 *
 * Events: 'exit' (code, signal) when the command ended; 'close' (code, signal) once it ended
 * and its stdout/stderr reached end of file; 'gone' when the keeper itself exited (nothing it
 * started is left).
 */
import type { ChildProcess } from 'node:child_process';
import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import type { Readable, Writable } from 'node:stream';
import { launchKeeper, retireZygote, type KeeperChannels, type OutputListener } from './launch.js';
import { connectAdoption, FramedStdin, KeptControl } from './kept.js';
import {
  ControlReader,
  encodeKeep,
  encodeSpec,
  KILL_MESSAGE,
  type KeeperDump,
  parseStartReport,
  resizeMessage,
  signalMessage,
  signalNumber,
  startError,
  startTimeoutError,
  type KeeperSpawnError,
  type KeeperSpec,
} from './wire.js';
import { assertKeeperBuilt } from '../../native/index.js';
import type { KeepOptions } from '../../backend/index.js';

export { prepareKeepers, setKeeperLaunch, type OutputListener } from './launch.js';
export type { KeeperDump, KeeperSpawnError } from './wire.js';

export interface KeeperSpawnOptions extends KeeperSpec {
  /**
   * How long the keeper may take to pick the start up (until the command is forked) before
   * the start fails with ETIMEDOUT (5 s): a zygote that does not answer (stopped, wedged) is
   * then replaced, and every start waiting on it fails alike, its descriptors released.
   */
  startTimeoutMs?: number;
  /**
   * Kept mode (restart adoption): the keeper listens on `keep.path`, outlives its server for
   * `keep.adoptMs`, retains up to `keep.capBytes` of output and takes stdin as frames.
   */
  keep?: KeepOptions;
}

/** The default `startTimeoutMs`: a fork, even on a loaded machine, takes far less. */
export const KEEPER_START_TIMEOUT_MS = 5_000;

type KeptProcessEvents = {
  exit: [code: number | null, signal: NodeJS.Signals | null];
  close: [code: number | null, signal: NodeJS.Signals | null];
  gone: [];
};

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
  private readonly controlReader = new ControlReader();
  private exited = false;
  private openStreams = 0;
  private closeEmitted = false;
  private keeperRunning = true;
  private starting = true;
  private startFailed = false;
  /** 'exit' and 'close' wait until the start is known (see settleStart). */
  private reportsHeld = true;
  private settleStarted!: (err?: Error) => void;
  private startTimer: NodeJS.Timeout | null = null;
  private readonly channels: Omit<KeeperChannels, 'start'> & { start?: Socket };
  /** Kept mode: stdin as frames answered on `took` (null otherwise, or without stdin). */
  readonly framedStdin: FramedStdin | null = null;
  /** Kept mode (spawned with `keep`, or adopted; kept.ts): mark, drop, release, hand over. Null otherwise. */
  readonly kept: KeptControl | null = null;
  /** Resolves once the command runs; rejects if it could not start. */
  readonly started = new Promise<void>((resolve, reject) => {
    this.settleStarted = (err) => (err ? reject(err) : resolve());
  });
  private resolveGone!: () => void;
  /** Resolves when the keeper has exited: the command and everything it started are gone. */
  readonly whenGone = new Promise<void>((resolve) => (this.resolveGone = resolve));

  private constructor(
    channels: Omit<KeeperChannels, 'start'> & { start?: Socket },
    private readonly file: string,
    opts: KeeperSpawnOptions,
    adopted?: KeeperDump,
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
    if (opts.keep || adopted) {
      if (this.stdin) this.framedStdin = new FramedStdin(channels.stdin, adopted?.stdin.taken ?? 0, adopted?.stdin.eof ?? false);
      const sockets = [channels.stdin, channels.stdout, channels.stderr, channels.control, channels.start];
      this.kept = new KeptControl(opts.keep?.path ?? file, (line) => this.send(line), this.framedStdin, sockets);
    }
    if (channels.start) {
      this.watchStart(channels.start);
      // A keeper that never picks the start up (its zygote stopped) must not hold it forever.
      const timeoutMs = opts.startTimeoutMs ?? KEEPER_START_TIMEOUT_MS;
      this.startTimer = setTimeout(() => this.startTimedOut(timeoutMs), timeoutMs);
      this.startTimer.unref();
      channels.zygote?.pending.add(this);
    }
    // Errors on these sockets (EPIPE writing to a command that closed its stdin, ECONNRESET)
    // end the stream; what they mean is reported by 'exit'/'close', never by a crash.
    for (const stream of [channels.stdin, channels.stdout, channels.stderr, channels.control, channels.start]) stream?.on('error', () => {});
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
    if (adopted) this.control.resume(); // paused once its dump was read (readDump)
    // Only the keeper holds the other end of the control socket: its end of file is the
    // keeper's exit (a keeper spawned directly is also reaped: both, in either order).
    let pending = channels.child ? 2 : 1;
    const gone = () => {
      if (--pending > 0) return;
      this.keeperRunning = false;
      // Nothing can take input any more. (Its output sockets close at their end of file, once
      // what the keeper forwarded is read; its stdin socket writes only, and would never see
      // the keeper's end: it would stay open for as long as the server runs.)
      channels.stdin.destroy();
      channels.start?.destroy();
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
    if (adopted) {
      // Adopted (KeptProcess.adopt): the command runs already; its exit may be known.
      this.pid = adopted.pid;
      this.keeperPid = adopted.keeperPid;
      if (adopted.exited) {
        this.exited = true;
        this.exitCode = adopted.exited.code;
        this.signalCode = adopted.exited.signal;
      }
      this.settleStart();
    }
  }

  /**
   * Starts a keeper, like child_process.spawn: attach listeners now, then await `started`,
   * which resolves once the command runs (exec succeeded) and rejects with the OS error
   * (`syscall` 'chdir' or `spawn <file>`) otherwise.
   */
  static spawn(opts: KeeperSpawnOptions): KeptProcess {
    const spec = opts.keep ? Buffer.concat([encodeKeep(opts.keep), encodeSpec(opts)]) : encodeSpec(opts);
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

  /**
   * Adopts the kept keeper listening on `socketPath` (restart adoption): receives its control socket
   * and the stdin/stdout/stderr channels (SCM_RIGHTS), then reads its dump (what it retained,
   * its marks, the exit, the writeIds it took). The object then behaves as a spawned one; the
   * dump is the caller's to rebuild the process's log from. Rejects if the keeper refuses,
   * is not there, or does not finish its dump within `timeoutMs`.
   */
  static async adopt(
    socketPath: string,
    timeoutMs: number,
    shapeOf: (dump: KeeperDump) => { tty: boolean; stdin: boolean },
    maxDumpBytes?: number,
  ): Promise<{ proc: KeptProcess; dump: KeeperDump }> {
    const { channels, dump, rest } = await connectAdoption(socketPath, timeoutMs, maxDumpBytes);
    let shape: { tty: boolean; stdin: boolean };
    try {
      shape = shapeOf(dump);
    } catch (err) {
      for (const socket of [channels.stdin, channels.stdout, channels.stderr, channels.control]) socket.destroy();
      throw err;
    }
    const spec = { file: socketPath, args: [], cwd: '/', env: {}, stdin: shape.stdin, tty: shape.tty ? { cols: 80, rows: 24 } : undefined };
    const proc = new KeptProcess(channels, socketPath, spec, dump);
    if (rest.length > 0) proc.onControl(rest.toString('latin1'));
    return { proc, dump };
  }

  /** The keeper still runs: the command, or something it started, is alive. */
  get alive(): boolean {
    return this.keeperRunning;
  }

  /** Sends `signal` to the command's process group (the command itself if it left it). */
  kill(signal: NodeJS.Signals | number = 'SIGTERM'): boolean {
    const number = signalNumber(signal);
    if (!number) return false;
    return this.send(signalMessage(number));
  }

  /** Kills the command and every descendant; the keeper reports the exit and ends. */
  killTree(): void {
    this.send(KILL_MESSAGE);
  }

  /**
   * Synchronous last resort (process exit, uncaught exception): SIGTERM to the keeper makes
   * it kill the tree. A server that dies anyway closes the control socket, which does the same.
   */
  killTreeSync(evenKept = false): void {
    if (!this.keeperRunning || !this.keeperPid) return;
    // A kept keeper outlives its server on purpose (restart adoption): only a stop for good kills it.
    if (this.kept && !this.kept.released && !evenKept) return;
    try {
      process.kill(this.keeperPid, 'SIGTERM');
    } catch {
      /* already gone */
    }
  }

  /** Sets the terminal's size (SIGWINCH to its foreground job); no-op without a terminal. */
  resize(cols: number, rows: number): void {
    this.send(resizeMessage(cols, rows));
  }

  private send(line: string): boolean {
    if (this.control.destroyed || !this.control.writable) return false;
    this.control.write(line);
    return true;
  }

  private onControl(text: string): void {
    for (const message of this.controlReader.messages(text)) {
      if (message.kind === 'exit') this.onExit(message.code, message.signal);
      else if (message.kind === 'took') this.framedStdin?.took(message.count);
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
      const report = parseStartReport(text);
      if (report.pid !== null) {
        this.pid = report.pid;
        this.keeperPid = report.keeperPid || this.spawnedKeeper?.pid || 0;
      }
      const failure = report.error && startError(report.error.stage, report.error.errno, this.file);
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
    const failure = (file: string) => startTimeoutError(who, timeoutMs, file);
    if (zygote) {
      const waiting = [...zygote.pending];
      retireZygote(zygote);
      for (const proc of waiting) proc.zygoteRetired(failure);
    }
    this.abandonStart(failure(this.file));
  }

  /** @internal The zygote this start was sent through was retired (launch.ts `PendingStart`): the start fails. */
  zygoteRetired(failure: (file: string) => KeeperSpawnError): void {
    this.abandonStart(failure(this.file));
  }

  /** Fails the start and lets go of every channel (nothing of it runs, nothing is held). */
  private abandonStart(err: KeeperSpawnError): void {
    this.pickedUp();
    if (!this.starting) return;
    this.settleStart(err); // which lets go of every channel
    try {
      this.spawnedKeeper?.kill('SIGKILL');
    } catch {
      /* gone */
    }
  }

  private settleStart(err?: Error): void {
    if (!this.starting) return;
    this.starting = false;
    this.pickedUp();
    this.settleStarted(err);
    if (err) {
      this.letGoOfFailedStart();
      return; // as with ChildProcess: a command that never ran reports no exit
    }
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

  /**
   * A start that failed, whichever way (the command could not be run, the keeper ended or did
   * not answer in time): nothing of it may run on, and nothing of it may be held. The keeper
   * is told to kill what it may have started — a kept keeper takes that as its release, so it
   * ends as without keep instead of waiting for an adopter — and then sees its control socket
   * end; every other channel is closed now (nobody will read or write them).
   */
  private letGoOfFailedStart(): void {
    this.startFailed = true;
    this.kept?.release();
    this.send(KILL_MESSAGE);
    // Closed once that is written, not once the keeper answers: one that never will (stopped,
    // wedged) must not hold the descriptor.
    if (!this.control.destroyed) this.control.end(() => this.control.destroy());
    const { stdin, stdout, stderr, start } = this.channels;
    for (const socket of [stdin, stdout, stderr, start]) socket?.destroy();
  }

  /** The keeper stopped talking: it exited (or was killed) — the command cannot report anything more. */
  private onControlClosed(): void {
    // (How the start went is the start channel's to say: it reaches end of file too. A command
    // whose start failed is no process to kill: its pid may already be another's.)
    if (this.exited || this.pid === 0 || this.startFailed || this.kept?.handedOver) return;
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


