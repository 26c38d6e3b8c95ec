/**
 * One child process of a session, from the protocol's side: its events go into its output
 * log (numbered by one sequence: output, exited, closed — closed last), which its session
 * sends over the attached connection in turn with the other processes; acknowledgements
 * (or, in the Codex dialect, the kernel taking a frame and `process/read` answers) free
 * them; and the child is read only while the log's decision (`shouldReadChild`) says so.
 * How the child is run (pipes, a pty) is `spawn.ts`'s business.
 *
 * It coordinates; each job has its module: what it is given (process-host.ts), reads cut
 * into chunks (output-chunks.ts), what its output holds under the memory budget
 * (held-output.ts), how long it was not read (pause-clock.ts), the long polls of
 * process/read (news-waiters.ts), stdin and its writeIds (child-stdin.ts, write-ids.ts),
 * when its exit is reported (exit-grace.ts), signal names (protocol/signals.ts).
 */
import type { OutputStream, ProcessReadResult, SignalName, WriteStatus } from '../protocol/index.js';
import { OutputLog, type LogEntry, type OutputEntry } from './output-log.js';
import { shouldReadChild } from './read-decision.js';
import type { ChildEvents, SpawnedChild } from './spawn.js';
import { keeperObserver, rawExitCode, restoreState, type AdoptedChild } from './process-kept.js';
import type { RestoreState } from './output-log.js';
import type { OutputLimits, ProcessHost, SpawnSpec } from './process-host.js';
import type { SessionBackend } from './backend.js';
import { settleWithin } from '../util/timeouts.js';
import { ByteArena } from '../util/byte-arena.js';
import { HeldOutput } from './held-output.js';
import { NewsWaiters } from './news-waiters.js';
import { appendRead, chunkLimit } from './output-chunks.js';
import { PauseClock } from './pause-clock.js';
import { osSignal } from '../protocol/signals.js';
import { ChildStdin } from './child-stdin.js';
import { ExitGrace } from './exit-grace.js';

export type { OutputLimits, ProcessHost, SpawnSpec } from './process-host.js';

export class ManagedProcess {
  readonly id: string;
  readonly tty: boolean;
  /** Extension `binaryOutput`: what its binary output frames carry instead of the id (0: none). */
  readonly handle: number;
  pid = 0;
  private child: SpawnedChild | null = null;
  private readonly stdin: ChildStdin;

  private readonly log: OutputLog;
  /** Where its output bytes live until the log lets go of them (reused blocks: no allocation per read). */
  private readonly arena: ByteArena;
  private readonly limits: OutputLimits;
  /** What its output holds under the memory budget, reported to the session. */
  private readonly held: HeldOutput;
  /** Output is sent only after the process/start answer, so no client sees events of an id it was not told about. */
  private announced = false;

  exitCode: number | null = null;
  /** Why the server gave up on the process (an output stream failed), for `process/read`. */
  failure: string | null = null;
  /** When its exit is reported (after its output, or after a grace). */
  private readonly exit = new ExitGrace();
  closed = false;

  /** Whether its output is read (its streams start paused; `updateFlow` decides from the start), and how long not. */
  private readonly flow = new PauseClock();
  private released = false;
  private resolveClosed!: () => void;
  /** Resolves once the process has exited and its output reached end of file. */
  readonly whenClosed = new Promise<void>((resolve) => (this.resolveClosed = resolve));
  private readonly waiters = new NewsWaiters();

  private constructor(
    spec: SpawnSpec,
    private readonly host: ProcessHost,
    /** Adopted (issue #27): the log is rebuilt from the keeper's dump. */
    restore?: RestoreState,
  ) {
    this.id = spec.processId;
    this.tty = spec.tty;
    this.handle = spec.handle ?? 0;
    this.stdin = new ChildStdin(spec.tty);
    this.limits = spec.limits;
    // Spare blocks given back after a quiet while: the budget learns of it.
    this.arena = new ByteArena({ onTrim: () => this.updateFlow() });
    const logOptions = {
      memory: this.arena,
      windowBytes: spec.limits.windowBytes,
      retentionBytes: spec.limits.retentionBytes,
      // A Codex client gets chunks the size of a pipe read at most (it may read in small steps).
      maxChunkBytes: chunkLimit(spec.limits.maxChunkBytes, spec.clientAcks),
      clientAcks: spec.clientAcks,
      // Kept mode: the keeper learns what clients could see, and what the log let go of.
      observer: spec.keep || restore ? keeperObserver(() => this.child?.kept) : undefined,
    };
    this.log = restore ? OutputLog.restore(logOptions, restore) : new OutputLog(logOptions);
    this.held = new HeldOutput(spec.memory, (delta) => this.host.outputHeldChanged?.(delta));
    if (this.held.pressured) {
      this.log.squeezeHistory(true);
      this.arena.squeeze(true);
    }
  }

  /**
   * Spawns the child through its session's `backend` (backend.ts); rejects with
   * -32603 and the OS message if it cannot start (nothing is left behind).
   */
  static async start(spec: SpawnSpec, host: ProcessHost, backend: Pick<SessionBackend, 'spawn'>): Promise<ManagedProcess> {
    const proc = new ManagedProcess(spec, host);
    const child = await backend.spawn(spec, proc.childEvents(spec.tty));
    proc.child = child;
    proc.pid = child.pid;
    proc.stdin.attach(child.stdin, child.kept?.stdin ?? null);
    proc.updateFlow();
    return proc;
  }

  /** The events of its child, as `start` and `adopt` wire them. */
  private childEvents(tty: boolean): ChildEvents {
    return {
      output: (stream, data) => this.onOutput(stream, data),
      exit: (rawExitCode) => this.onExit(rawExitCode, tty),
      close: () => {
        this.recordExit();
        this.recordClosed();
      },
      streamError: (stream, error) => this.onStreamError(stream, error),
    };
  }

  /**
   * A process of a kept keeper a successor server adopted (issue #27, kept-server.ts): its
   * log rebuilt from the keeper's dump (same seqs as before), its exit as the keeper knew it,
   * the writeIds the keeper took. It was announced before: its output flows when attached.
   * @internal
   */
  static adopt(spec: SpawnSpec, host: ProcessHost, adopted: AdoptedChild): ManagedProcess {
    const { child, dump } = adopted;
    const proc = new ManagedProcess(spec, host, restoreState(dump, spec.tty));
    adopted.bind(proc.childEvents(spec.tty));
    if (proc.log.exitSeq !== null && dump.exited) {
      proc.exitCode = rawExitCode(dump.exited.code, dump.exited.signal);
    }
    if (proc.log.closeSeq !== null) {
      proc.closed = true;
      proc.resolveClosed();
    }
    proc.child = child;
    proc.pid = child.pid;
    proc.stdin.seed(dump.ids);
    proc.stdin.attach(child.stdin, child.kept?.stdin ?? null);
    if (dump.exited) proc.stdin.close();
    proc.announced = true;
    adopted.begin();
    proc.updateFlow();
    return proc;
  }

  /** Kept mode: its keeper's socket ('' otherwise). @internal */
  get keeperSocket(): string {
    return this.child?.kept?.socketPath ?? '';
  }

  /** Kept mode: the server stops and hands the keeper over (nothing is killed). @internal */
  handOver(): void {
    this.child?.kept?.handOver();
  }

  private onExit(rawExitCode: number, tty: boolean): void {
    if (tty) {
      this.exit.exited(rawExitCode);
      this.stdin.close();
      return; // a pty's exit and close coincide
    }
    // Report the exit once the pipes are drained (close), so output usually precedes it;
    // do not hold it back forever when a grandchild keeps the pipes open.
    this.exit.exited(rawExitCode, () => this.recordExit());
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
    // Several chunks if the read is larger than a chunk or than what the block has left (output-chunks.ts).
    appendRead(this.log, this.arena, this.log.options.maxChunkBytes, stream, data);
    this.changed();
    this.waiters.wake();
  }

  private recordExit(): void {
    const code = this.exit.settle();
    if (this.log.exitSeq !== null || code === null) return;
    this.exitCode = code;
    this.log.recordExit(this.exitCode);
    this.stdin.close();
    this.changed();
    this.waiters.wake();
  }

  private recordClosed(): void {
    if (this.closed) return;
    this.closed = true;
    this.resolveClosed();
    this.log.recordClose();
    this.changed();
    this.waiters.wake();
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
    const pressured = this.held.pressured;
    this.log.squeezeHistory(pressured);
    this.arena.squeeze(pressured);
    this.updateFlow();
  }

  /** Applies the output log's decision to the child: read it, or let it block on write. */
  updateFlow(): void {
    if (!this.released) {
      // Every change of the log passes here: the budget always knows what this process keeps.
      this.held.update({ historyBytes: this.log.historyBytes, unackedBytes: this.log.unackedBytes, arenaHeldBytes: this.arena.heldBytes });
    }
    const read = shouldReadChild({
      finished: this.closed || this.released,
      attached: this.host.attached,
      unackedBytes: this.log.unackedBytes,
      unsentBytes: this.log.unsentBytes,
      windowBytes: this.limits.windowBytes,
      readAheadBytes: this.limits.readAheadBytes,
      // Under pressure, only sessions over their fair share (or past it with the budget full) pause.
      memoryPressured: this.held.budgeted ? (this.host.outputHeldBack ?? this.held.pressured) : false,
    });
    if (this.flow.set(read)) this.child?.setReading(read);
  }

  // ---- process/read --------------------------------------------------------------------------

  private hasNewsAfter(afterSeq: number): boolean {
    const exitSeq = this.log.exitSeq;
    return this.log.lastOutputSeq > afterSeq || this.closed || this.released || (exitSeq !== null && exitSeq > afterSeq);
  }

  /** Resolves once there is something new after `afterSeq`, after `waitMs`, or when `signal` aborts (the asking connection closed). */
  async waitForNews(afterSeq: number, waitMs: number, signal?: AbortSignal): Promise<void> {
    await this.waiters.wait(() => this.hasNewsAfter(afterSeq), waitMs, signal);
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
    this.held.close();
    this.waiters.wake();
    this.updateFlow();
    // Kept mode: the keeper is done waiting for a successor; it ends once its tree is gone.
    this.child?.kept?.release();
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
    return this.stdin.write(data, writeId, closeStdin, this.log.exitSeq !== null);
  }

  /** Sends `name` to the command's process group. */
  signal(name: SignalName): void {
    if (this.closed) return;
    this.child?.signal(osSignal(name));
  }

  /**
   * Kills a running process (exit 137); false if it had already exited. Whatever it started
   * dies too — also what outlived an already exited process.
   */
  terminate(): boolean {
    const running = this.log.exitSeq === null && !this.exit.hasExited;
    this.killTree();
    return running;
  }

  /** Kills the command and every descendant (its keeper does), whatever its state. */
  killTree(): void {
    this.child?.killTree();
  }

  /** Synchronous last resort when the server process is going down (a kept keeper only with `evenKept`). */
  killTreeSync(evenKept = false): void {
    this.child?.killTreeSync(evenKept);
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
    return !this.flow.reading;
  }

  /** Bytes written to its stdin (re-sent writes counted once). */
  get bytesWritten(): number {
    return this.stdin.bytesWritten;
  }

  /** How long its pipes have not been read, in all (metrics). */
  get pausedMs(): number {
    return this.flow.pausedMs;
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
