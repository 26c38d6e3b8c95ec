/**
 * One child process of a session, from the protocol's side: its events go into its output
 * log (numbered by one sequence: output, exited, closed — closed last), which its session
 * sends over the attached connection in turn with the other processes; acknowledgements
 * (or, in the Codex dialect, the kernel taking a frame and `process/read` answers) free
 * them; and the child is read only while the log's decision (`shouldReadChild`) says so.
 * How the child is run (pipes, a pty) is `spawn.ts`'s business.
 */
import { performance } from 'node:perf_hooks';
import type { OutputStream, ProcessReadResult, SignalName, WriteStatus } from '../protocol/index.js';
import type { MemoryAccount, MemoryBudget } from './memory-budget.js';
import { OutputLog, shouldReadChild, type LogEntry, type OutputEntry } from './output-log.js';
import type { ChildSpec, SpawnedChild } from './spawn.js';
import { localProcesses, type ProcessBackend } from './backend.js';
import { settleWithin } from '../util/timeouts.js';
import { ByteArena } from '../util/byte-arena.js';

/** The session a process belongs to: it schedules sending over the attached connection. */
export interface ProcessHost {
  /** A connection is attached and taking output (the initialize answer went out). */
  readonly attached: boolean;
  /** The process has something to send: put it in the send rotation. */
  outputReady(proc: ManagedProcess): void;
  processClosed(proc: ManagedProcess): void;
  /** The client acknowledged every event up to the close (`acks`): its output was freed. */
  processDone(proc: ManagedProcess): void;
  /** The output this process holds under the memory budget changed by `delta` bytes (its session's fair share). */
  outputHeldChanged?(delta: number): void;
  /**
   * Whether the memory budget holds this session's children back now (its fair share,
   * fair-share.ts); undefined: whenever the budget is pressured.
   */
  readonly outputHeldBack?: boolean;
}

/** How a process keeps and paces its output (from the server's options). */
export interface OutputLimits {
  /** Unacknowledged output at which the child stops being read (--output-window). */
  windowBytes: number;
  /** Acknowledged output kept for process/read (--output-retention). */
  retentionBytes: number;
  /** Output not yet handed to an attached connection at which the child stops being read. */
  readAheadBytes: number;
  /** Largest chunk built by joining reads while the socket is busy. */
  maxChunkBytes: number;
  /** Largest process/read answer (decoded bytes), so a big log is never one giant message. */
  readCapBytes: number;
}

export interface SpawnSpec extends ChildSpec {
  processId: string;
  limits: OutputLimits;
  /** The session negotiated `acks`: the client acknowledges what it consumed. */
  clientAcks: boolean;
  /** The server's memory budget: the output kept is counted there, and its pressure pauses the child. */
  memory?: MemoryBudget;
  /** Extension `binaryOutput`: the handle addressing its binary output frames (0: none). */
  handle?: number;
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
/** Largest chunk joined from reads for a client without extensions (what one pipe read gives). */
const CODEX_MAX_CHUNK_BYTES = 64 * 1024;
/** Remembered writeIds per process (docs/protocol.md, "What tether adds to these": the last 4096). */
const WRITE_ID_MEMORY = 4096;

export class ManagedProcess {
  readonly id: string;
  readonly tty: boolean;
  /** Extension `binaryOutput`: what its binary output frames carry instead of the id (0: none). */
  readonly handle: number;
  pid = 0;
  private child: SpawnedChild | null = null;
  private stdinOpen = false;

  private readonly log: OutputLog;
  /** Where its output bytes live until the log lets go of them (reused blocks: no allocation per read). */
  private readonly arena: ByteArena;
  private readonly limits: OutputLimits;
  private readonly memory: { budget: MemoryBudget; history: MemoryAccount; unacked: MemoryAccount } | null;
  /** What was last reported to the host as held (history + unacknowledged). */
  private reportedHeld = 0;
  /** Output is sent only after the process/start answer, so no client sees events of an id it was not told about. */
  private announced = false;

  exitCode: number | null = null;
  /** Why the server gave up on the process (an output stream failed), for `process/read`. */
  failure: string | null = null;
  private rawExitCode: number | null = null;
  closed = false;
  private exitTimer: NodeJS.Timeout | null = null;

  /** The child's output streams start paused (spawn.ts); `updateFlow` decides from the start. */
  private reading = false;
  private pausedSince = performance.now();
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
    this.handle = spec.handle ?? 0;
    this.limits = spec.limits;
    // Spare blocks given back after a quiet while: the budget learns of it.
    this.arena = new ByteArena({ onTrim: () => this.updateFlow() });
    this.log = new OutputLog({
      memory: this.arena,
      windowBytes: spec.limits.windowBytes,
      retentionBytes: spec.limits.retentionBytes,
      // A Codex client gets chunks the size of a pipe read at most (it may read in small steps).
      maxChunkBytes: spec.clientAcks ? spec.limits.maxChunkBytes : Math.min(spec.limits.maxChunkBytes, CODEX_MAX_CHUNK_BYTES),
      clientAcks: spec.clientAcks,
    });
    const budget = spec.memory;
    this.memory = budget ? { budget, history: budget.account('output'), unacked: budget.account('unacked') } : null;
    if (budget?.pressured) {
      this.log.squeezeHistory(true);
      this.arena.squeeze(true);
    }
  }

  /**
   * Spawns the child through `backend` (local keeper processes by default); rejects with
   * -32603 and the OS message if it cannot start (nothing is left behind).
   */
  static async start(spec: SpawnSpec, host: ProcessHost, backend: ProcessBackend = localProcesses): Promise<ManagedProcess> {
    const proc = new ManagedProcess(spec, host);
    const child = await backend.spawn(spec, {
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
    proc.updateFlow();
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

  /** `data` is only valid during the call (a read buffer shared by every child): it is copied. */
  private onOutput(stream: OutputStream, data: Buffer): void {
    if (this.released) return; // being removed: drain without keeping anything
    // A read (up to 256 KiB) larger than a chunk may be (64 KiB for a Codex client, which may
    // read back in small steps and keeps a small retention) goes in as several chunks; and a
    // read that does not fit what is left of the block being filled is split there, so blocks
    // are filled to the end (memory held is about the bytes kept, not a block per read).
    const max = this.log.options.maxChunkBytes;
    for (let at = 0; at < data.length; ) {
      const n = Math.min(max, data.length - at, this.arena.fits);
      this.log.append(stream, this.arena.copy(data.subarray(at, at + n)));
      at += n;
    }
    this.changed();
    this.wake();
  }

  private recordExit(): void {
    if (this.exitTimer) {
      clearTimeout(this.exitTimer);
      this.exitTimer = null;
    }
    if (this.log.exitSeq !== null || this.rawExitCode === null) return;
    this.exitCode = this.rawExitCode;
    this.log.recordExit(this.exitCode);
    this.stdinOpen = false;
    this.changed();
    this.wake();
  }

  private recordClosed(): void {
    if (this.closed) return;
    this.closed = true;
    this.resolveClosed();
    this.log.recordClose();
    this.changed();
    this.wake();
    this.host.processClosed(this);
  }

  /** The log moved: offer what it has to send, and re-decide whether to read the child. */
  private changed(): void {
    if (this.sendable) this.host.outputReady(this);
    this.updateFlow();
  }

  // ---- sending, acknowledgement, resume (driven by the session) ----------------------------

  /** @internal The process/start answer went out: its output may follow. */
  announce(): void {
    if (this.announced) return;
    this.announced = true;
    this.changed();
  }

  /** Whether the session should send something of this process now. */
  get sendable(): boolean {
    return this.announced && this.log.hasSendable;
  }

  /** The next event to send (now counted as sent), or undefined. */
  takeNext(): LogEntry | undefined {
    if (!this.announced) return undefined;
    // Binary frames send a chunk's pieces as they are (no copy); JSON needs one Buffer.
    const entry = this.log.takeNext(this.handle === 0);
    if (entry?.kind === 'output') this.updateFlow();
    return entry;
  }

  /** An output entry's bytes as one Buffer (its pieces joined, once). */
  outputData(entry: OutputEntry): Buffer {
    return this.log.joinOutput(entry);
  }

  /** A socket write of these pieces begins: their memory stays theirs until `releaseOutput`. */
  retainOutput(parts: readonly Buffer[]): void {
    for (const part of parts) this.arena.retain(part);
  }

  /** The socket write of these pieces completed or failed. */
  releaseOutput(parts: readonly Buffer[]): void {
    this.arena.releaseAll(parts);
  }

  /** Codex dialect: the kernel took this process's frames up to `seq`. */
  written(seq: number): void {
    this.log.written(seq);
    this.updateFlow();
  }

  /** `process/ack`: the client consumed every event up to `seq`. */
  acknowledge(seq: number): void {
    // Nothing beyond what was sent can have been consumed.
    if (!this.log.acknowledge(Math.min(seq, this.log.sentSeq))) return;
    this.updateFlow();
    if (this.log.fullyAcknowledged) {
      // Its output is of no use any more: free it now. The rest (exit code, the writeIds that
      // make a re-sent write idempotent) is small and stays for the closed retention.
      this.log.dropHistory();
      this.arena.dispose(); // no more output will come: no block to keep for it
      this.updateFlow();
      this.host.processDone(this);
    }
  }

  /** The connection went away: what it did not confirm is sent again on the next one. */
  detached(): void {
    this.log.rewind();
    this.updateFlow();
  }

  /**
   * A client resumed the session. With acks it says what it already has (`deliveredSeq`):
   * sending resumes right after. Without, the output it missed is held until it reads it
   * back (see `OutputLog.holdBacklog`), or until `releaseHold`.
   */
  resumed(deliveredSeq: number | undefined): void {
    if (this.log.options.clientAcks) {
      if (deliveredSeq !== undefined) this.log.skipTo(deliveredSeq);
    } else {
      this.log.holdBacklog();
    }
    this.updateFlow();
  }

  /** The resumed client did not read its backlog in time: send it as notifications after all. */
  releaseHold(): void {
    if (!this.log.holding) return;
    this.log.releaseHold();
    this.changed();
  }

  /** The server's memory budget crossed its pause mark (either way): squeeze or keep history, pause or read. */
  memoryPressureChanged(): void {
    if (this.released) return;
    const pressured = this.memory?.budget.pressured ?? false;
    this.log.squeezeHistory(pressured);
    this.arena.squeeze(pressured);
    this.updateFlow();
  }

  /** Applies the output log's decision to the child: read it, or let it block on write. */
  updateFlow(): void {
    if (this.memory && !this.released) {
      // Every change of the log passes here: the budget always knows what this process keeps.
      // What its blocks hold beyond the bytes themselves (the block being filled, blocks kept
      // for reuse) counts as history: the budget sees the memory, not just the output.
      this.memory.history.set(Math.max(this.log.historyBytes, this.arena.heldBytes - this.log.unackedBytes));
      this.memory.unacked.set(this.log.unackedBytes);
      this.reportHeld(this.memory.history.bytes + this.memory.unacked.bytes);
    }
    const read = shouldReadChild({
      finished: this.closed || this.released,
      attached: this.host.attached,
      unackedBytes: this.log.unackedBytes,
      unsentBytes: this.log.unsentBytes,
      windowBytes: this.limits.windowBytes,
      readAheadBytes: this.limits.readAheadBytes,
      // Under pressure, only sessions over their fair share (or past it with the budget full) pause.
      memoryPressured: this.memory ? (this.host.outputHeldBack ?? this.memory.budget.pressured) : false,
    });
    if (read === this.reading) return;
    this.reading = read;
    if (!read) this.pausedSince = performance.now();
    else this.pausedTotalMs += performance.now() - this.pausedSince;
    this.child?.setReading(read);
  }

  /** Tells the session what this process holds now (its fair share counts it). */
  private reportHeld(held: number): void {
    const delta = held - this.reportedHeld;
    if (delta === 0) return;
    this.reportedHeld = held;
    this.host.outputHeldChanged?.(delta);
  }

  // ---- process/read --------------------------------------------------------------------------

  private wake(): void {
    if (this.waiters.size === 0) return;
    const waiters = [...this.waiters];
    this.waiters.clear();
    for (const w of waiters) w();
  }

  private hasNewsAfter(afterSeq: number): boolean {
    const exitSeq = this.log.exitSeq;
    return this.log.lastOutputSeq > afterSeq || this.closed || this.released || (exitSeq !== null && exitSeq > afterSeq);
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
   * The process is being removed (session expired, server shutting down, fully
   * acknowledged): wake every long-poll, and drain its pipes without keeping anything, so a
   * paused child still reaches EOF and nothing accumulates.
   */
  release(): void {
    this.released = true;
    // Nobody can read it any more: its output goes now (it may itself live on a while, in its
    // session's set of processes whose descendants still run).
    this.log.discard();
    this.arena.dispose(); 
    this.memory?.history.close();
    this.memory?.unacked.close();
    this.reportHeld(0);
    this.wake();
    this.updateFlow();
  }

  read(afterSeq: number, maxBytes: number | null): ProcessReadResult {
    const wasHolding = this.log.holding;
    const { chunks, nextSeq } = this.log.read(afterSeq, maxBytes, this.limits.readCapBytes);
    // In the Codex dialect the reader now holds what it read: evictable, and the child may run.
    if (wasHolding && !this.log.holding) this.changed();
    else this.updateFlow();
    return {
      chunks: chunks.map((c) => ({ seq: c.seq, stream: c.stream, chunk: c.data.toString('base64') })),
      nextSeq,
      exited: this.log.exitSeq !== null,
      exitCode: this.exitCode,
      closed: this.closed,
      failure: this.failure,
      sandboxDenied: false,
    };
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
    if (!this.stdinOpen || this.log.exitSeq !== null) return 'stdinClosed';
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
    const running = this.log.exitSeq === null && this.rawExitCode === null;
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

  /** Whether its output is currently not read (window full, or its connection behind). */
  get isPaused(): boolean {
    return !this.reading;
  }

  /** Bytes written to its stdin (re-sent writes counted once). */
  get bytesWritten(): number {
    return this.inputBytes;
  }

  /** How long its pipes have not been read, in all (metrics). */
  get pausedMs(): number {
    return this.pausedTotalMs + (this.reading ? 0 : performance.now() - this.pausedSince);
  }

  /** Bytes of output read from the child so far. */
  get bytesRead(): number {
    return this.log.totalBytes;
  }

  /** Bytes of output currently kept (unacknowledged, and history for process/read). */
  get retained(): number {
    return this.log.retainedBytes;
  }

  /** Bytes of output sent or waiting to be sent that the client has not acknowledged. */
  get unacknowledged(): number {
    return this.log.unackedBytes;
  }

  /** Bytes of output not handed to the connection yet (the rest of `unacknowledged` is in flight). */
  get unsent(): number {
    return this.log.unsentBytes;
  }

  /** Seq of the last event (output, exit, close) the client acknowledged. */
  get acknowledgedSeq(): number {
    return this.log.ackedSeq;
  }

  /** Resolves when the child has closed (used by shutdown), or after `timeoutMs`. */
  async waitClosed(timeoutMs: number): Promise<void> {
    await settleWithin(this.whenClosed, timeoutMs);
  }
}
