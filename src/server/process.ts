/**
 * One child process of a session, from the protocol's side: its events numbered with one
 * sequence counter (output, exited, closed — closed last) in its output log, kept for
 * `process/read`, sent through its host, and its output read only while the log says so.
 * How the child is run (pipes, a pty) is `spawn.ts`'s business.
 */
import { performance } from 'node:perf_hooks';
import type { OutputStream, ProcessReadResult, SignalName, WriteStatus } from '../protocol/index.js';
import { OutputLog, shouldPauseReading, type LoggedChunk } from './output-log.js';
import { spawnChild, type ChildSpec, type SpawnedChild } from './spawn.js';
import { settleWithin } from '../util/timeouts.js';

/** Where a process sends its events: its session, which forwards them to the attached connection. */
export interface ProcessHost {
  /** True while no connection can take output fast enough (ws.bufferedAmount above the high-water mark). */
  readonly backpressured: boolean;
  /**
   * Sends `process/output` if a connection is attached (returns false if none is).
   * `onWritten(ok)` runs once the frame was handed to the kernel (ok) or the socket died
   * first (not ok): only then does the chunk count as delivered.
   */
  sendOutput(processId: string, seq: number, stream: OutputStream, chunk: string, onWritten: (ok: boolean) => void): boolean;
  sendNotification(method: string, params: object): void;
  processClosed(proc: ManagedProcess): void;
}

export interface SpawnSpec extends ChildSpec {
  processId: string;
  retentionBytes: number;
}

const SIGNALS: Record<SignalName, NodeJS.Signals> = {
  interrupt: 'SIGINT',
  terminate: 'SIGTERM',
  kill: 'SIGKILL',
  hangup: 'SIGHUP',
  quit: 'SIGQUIT',
  user1: 'SIGUSR1',
  user2: 'SIGUSR2',
};

/** A process that exited with its pipes still open (a grandchild holds them) reports its exit after this. */
const EXIT_WITHOUT_EOF_GRACE_MS = 20;
/** Remembered writeIds per process (PROTOCOL.md: at least 4096). */
const WRITE_ID_MEMORY = 4096;

export class ManagedProcess {
  readonly id: string;
  readonly tty: boolean;
  pid = 0;
  private child: SpawnedChild | null = null;
  private stdinOpen = false;

  private readonly log: OutputLog;

  exitCode: number | null = null;
  /** Why the server gave up on the process (an output stream failed), for `process/read`. */
  failure: string | null = null;
  private exitSeq: number | null = null;
  private rawExitCode: number | null = null;
  closed = false;
  private exitTimer: NodeJS.Timeout | null = null;

  private paused = false;
  private pausedSince = 0;
  private pausedTotalMs = 0;
  private inputBytes = 0;
  private released = false;
  private resolveClosed!: () => void;
  /** Resolves once the process has exited and its output reached end of file. */
  readonly whenClosed = new Promise<void>((resolve) => (this.resolveClosed = resolve));
  private waiters = new Set<() => void>();
  private writeIds = new Set<string>();

  private constructor(
    spec: SpawnSpec,
    private readonly host: ProcessHost,
  ) {
    this.id = spec.processId;
    this.tty = spec.tty;
    this.log = new OutputLog(spec.retentionBytes);
  }

  /** Spawns the child; rejects with -32603 and the OS message if it cannot start (nothing is left behind). */
  static async start(spec: SpawnSpec, host: ProcessHost): Promise<ManagedProcess> {
    const proc = new ManagedProcess(spec, host);
    const child = await spawnChild(spec, {
      output: (stream, data) => proc.onOutput(stream, data),
      exit: (rawExitCode) => proc.onExit(rawExitCode, spec.tty),
      close: () => {
        proc.recordExit();
        proc.recordClosed();
      },
      streamError: (stream, error) => proc.onStreamError(stream, error),
    });
    proc.child = child;
    proc.pid = child.pid;
    const stdin = child.stdin;
    if (stdin) {
      proc.stdinOpen = true;
      stdin.on('error', () => (proc.stdinOpen = false));
      stdin.on('close', () => (proc.stdinOpen = false));
    }
    return proc;
  }

  private onExit(rawExitCode: number, tty: boolean): void {
    this.rawExitCode = rawExitCode;
    if (tty) {
      this.stdinOpen = false;
      return; // a pty's exit and close coincide
    }
    // Report the exit once the pipes are drained (close), so output usually precedes it;
    // do not hold it back forever when a grandchild keeps the pipes open.
    this.exitTimer = setTimeout(() => this.recordExit(), EXIT_WITHOUT_EOF_GRACE_MS);
  }

  /**
   * Its output can no longer be read (the descriptor failed): the process cannot be followed
   * faithfully any more, so it fails alone — killed (its whole tree), with the reason in
   * `process/read`'s `failure` — and the server and every other process carry on.
   */
  private onStreamError(stream: OutputStream, error: Error): void {
    this.failure ??= `${stream}: ${error.message}`;
    this.killTree();
  }

  private onOutput(stream: OutputStream, buf: Buffer): void {
    if (this.released) return;
    const log = this.log;
    const chunk = log.append(stream, buf);
    if (!this.host.sendOutput(this.id, chunk.seq, stream, chunk.chunk, (ok) => this.onWritten(chunk, ok))) log.unsent(chunk);
    this.updateFlow();
    this.wake();
  }

  private onWritten(chunk: LoggedChunk, ok: boolean): void {
    this.log.written(chunk, ok);
    // The socket died with it queued: it is unsent again, which may pause the child.
    if (!ok) this.updateFlow();
  }

  /** Applies the output log's pause decision to the child's pipes. */
  updateFlow(): void {
    const shouldPause = shouldPauseReading({
      finished: this.closed || this.released,
      backpressured: this.host.backpressured,
      unsentBytes: this.log.unsentBytes,
      retainedBytes: this.log.retainedBytes,
      retentionBytes: this.log.retentionBytes,
    });
    if (shouldPause === this.paused) return;
    this.paused = shouldPause;
    if (shouldPause) this.pausedSince = performance.now();
    else this.pausedTotalMs += performance.now() - this.pausedSince;
    this.child?.setReading(!shouldPause);
  }

  private recordExit(): void {
    if (this.exitTimer) {
      clearTimeout(this.exitTimer);
      this.exitTimer = null;
    }
    if (this.exitSeq !== null || this.rawExitCode === null) return;
    this.exitCode = this.rawExitCode;
    this.exitSeq = this.log.takeSeq();
    this.stdinOpen = false;
    this.host.sendNotification('process/exited', {
      processId: this.id,
      seq: this.exitSeq,
      exitCode: this.exitCode,
      sandboxDenied: false,
    });
    this.wake();
  }

  private recordClosed(): void {
    if (this.closed) return;
    this.closed = true;
    this.resolveClosed();
    const seq = this.log.takeSeq();
    this.host.sendNotification('process/closed', { processId: this.id, seq });
    this.wake();
    this.host.processClosed(this);
  }

  private wake(): void {
    if (this.waiters.size === 0) return;
    const waiters = [...this.waiters];
    this.waiters.clear();
    for (const w of waiters) w();
  }

  private hasNewsAfter(afterSeq: number): boolean {
    return this.log.lastChunkSeq > afterSeq || this.closed || this.released || (this.exitSeq !== null && this.exitSeq > afterSeq);
  }

  /** Resolves once there is something new after `afterSeq`, after `waitMs`, or when `signal` aborts (the asking connection closed). */
  async waitForNews(afterSeq: number, waitMs: number, signal?: AbortSignal): Promise<void> {
    if (waitMs <= 0 || signal?.aborted || this.hasNewsAfter(afterSeq)) return;
    await new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.waiters.delete(check);
        signal?.removeEventListener('abort', done);
        resolve();
      };
      const check = () => {
        if (this.hasNewsAfter(afterSeq)) done();
        else this.waiters.add(check);
      };
      const timer = setTimeout(done, waitMs);
      signal?.addEventListener('abort', done, { once: true });
      this.waiters.add(check);
    });
  }

  /**
   * The process is being removed (session expired, server shutting down): wake every
   * long-poll, and drain its pipes without keeping anything, so a paused child still
   * reaches EOF and nothing accumulates.
   */
  release(): void {
    this.released = true;
    this.wake();
    this.updateFlow();
  }

  read(afterSeq: number, maxBytes: number | null): ProcessReadResult {
    // The client now holds everything returned: it may be evicted, and paused pipes resume.
    const { chunks, nextSeq } = this.log.read(afterSeq, maxBytes);
    this.updateFlow();
    return {
      chunks,
      nextSeq,
      exited: this.exitSeq !== null,
      exitCode: this.exitCode,
      closed: this.closed,
      failure: this.failure,
      sandboxDenied: false,
    };
  }

  /**
   * The client resumed but did not read this backlog back in time (a client that does not
   * care about a process's output): stop protecting it, so the child runs again and the
   * oldest output is evicted as usual.
   */
  releaseBacklog(): void {
    if (this.log.unsentBytes === 0) return;
    this.log.acknowledge(Number.MAX_SAFE_INTEGER);
    this.updateFlow();
  }

  /**
   * Writes to stdin. The answer waits until the child's stdin pipe — or its terminal — took
   * the bytes, so a client that awaits its writes cannot make the server buffer unbounded input.
   * `closeStdin` (a tether extension; Codex ignores it) ends the pipe after `data`, so a
   * child reading to end of file (`cat`, an MCP server) sees EOF as it would locally. A
   * pty has no end of file to send: there it is ignored (closing it would hang the child up).
   */
  async write(data: Buffer, writeId: string, closeStdin = false): Promise<WriteStatus> {
    if (this.writeIds.has(writeId)) return 'accepted'; // a re-send after a reconnect: already written
    if (!this.stdinOpen || this.exitSeq !== null) return 'stdinClosed';
    this.writeIds.add(writeId);
    this.inputBytes += data.length;
    if (this.writeIds.size > WRITE_ID_MEMORY * 2) {
      // Forget the oldest half at once (Sets iterate in insertion order).
      let drop = WRITE_ID_MEMORY;
      for (const id of this.writeIds) {
        if (drop-- <= 0) break;
        this.writeIds.delete(id);
      }
    }
    const stdin = this.child!.stdin!;
    if (closeStdin && !this.tty) {
      this.stdinOpen = false;
      stdin.end(data);
      return 'accepted';
    }
    if (data.length === 0) return 'accepted';
    // The callback runs once the kernel took these bytes, or with an error once the pipe is gone.
    await new Promise<void>((resolve) => stdin.write(data, () => resolve()));
    return 'accepted';
  }

  /** Sends `name` to the command's process group. */
  signal(name: SignalName): void {
    if (this.closed) return;
    this.child?.signal(SIGNALS[name]);
  }

  /**
   * Kills a running process (exit 137); false if it had already exited. Whatever it started
   * dies too — also what outlived an already exited process.
   */
  terminate(): boolean {
    const running = this.exitSeq === null && this.rawExitCode === null;
    this.killTree();
    return running;
  }

  /** Kills the command and every descendant (its keeper does), whatever its state. */
  killTree(): void {
    this.child?.killTree();
  }

  /** Synchronous last resort when the server process is going down. */
  killTreeSync(): void {
    this.child?.killTreeSync();
  }

  /** Sets the terminal's size (tty processes only). */
  resize(cols: number, rows: number): void {
    this.child?.resize(cols, rows);
  }

  /** True while the command, or anything it started (a daemon, a background job), is alive. */
  get keeperAlive(): boolean {
    return this.child?.alive ?? false;
  }

  /** Resolves when the command and everything it started are gone. */
  get whenGone(): Promise<void> {
    return this.child?.whenGone ?? Promise.resolve();
  }

  /** Whether its pipes are currently not read (backpressure or full retention). */
  get isPaused(): boolean {
    return this.paused;
  }

  /** Bytes written to its stdin (re-sent writes counted once). */
  get bytesWritten(): number {
    return this.inputBytes;
  }

  /** How long its pipes have not been read, in all (metrics). */
  get pausedMs(): number {
    return this.pausedTotalMs + (this.paused ? performance.now() - this.pausedSince : 0);
  }

  /** Bytes of output read from the child so far. */
  get bytesRead(): number {
    return this.log.totalBytes;
  }

  /** Bytes of output currently kept for replay. */
  get retained(): number {
    return this.log.retainedBytes;
  }

  /** Resolves when the child has closed (used by shutdown), or after `timeoutMs`. */
  async waitClosed(timeoutMs: number): Promise<void> {
    await settleWithin(this.whenClosed, timeoutMs);
  }
}
