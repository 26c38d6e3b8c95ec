/**
 * One child process of a session, from the protocol's side: its events go into its output
 * log (numbered by one sequence: output, exited, closed — closed last), which its session
 * sends over the attached connection in turn with the other processes; acknowledgements
 * (or, in the Codex dialect, the kernel taking a frame and `process/read` answers) free
 * them; and the child is read only while the log's decision (`shouldReadChild`) says so.
 *
 * It coordinates; each job has its module: its child and what is done to it directly
 * (running-child.ts, which it extends), what it is given (process-spec.ts), reads cut
 * into chunks (output-chunks.ts), whether the child is read, how long it was not and what its
 * output holds under the memory budget (output-flow.ts), the long polls of process/read
 * (news-waiters.ts) and its answer (log-read.ts), stdin and its writeIds (child-stdin.ts,
 * write-ids.ts), when its exit is reported (exit-grace.ts), signal names (protocol/signals.ts),
 * its log as its spec asks for it and in kept mode its observer (process-log.ts). Adopted by a
 * successor server (restart adoption), it is handed its log rebuilt (restart/process-kept.ts).
 */
import type { OutputStream, ProcessReadResult, SignalName, WriteStatus } from '../../protocol/index.js';
import type { OutputLog, LogEntry, OutputEntry, OutputGap } from './log/output-log.js';
import type { AdoptedChild, ChildEvents, ChildStarter } from '../backend/index.js';
import { processReadResult, watchReadResult } from './log/log-read.js';
import type { AdoptedOutput, LogOpener, OutputLimits, SpawnSpec } from './process-spec.js';
import { newLog } from './process-log.js';
import { settleWithin } from '../../util/timeouts.js';
import { ByteArena } from '../../util/byte-arena.js';
import { OutputFlow, type PauseReason } from './output-flow.js';
import { NewsWaiters } from './news-waiters.js';
import { appendRead } from './output-chunks.js';
import { osSignal } from '../../protocol/signals.js';
import { ExitGrace } from './exit-grace.js';
import { RunningChild } from './running-child.js';

export type { OutputLimits, SpawnSpec } from './process-spec.js';

/** The session a process belongs to: it schedules sending over the attached connection. */
export interface ProcessHost {
  /** A connection is attached and taking output (the initialize answer went out). */
  readonly attached: boolean;
  /** Connections watch it read-only (extension `attach`): acknowledged output stays readable as history. */
  readonly watched?: boolean;
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

export class ManagedProcess extends RunningChild {
  readonly id: string;
  readonly tty: boolean;
  /** Extension `binaryOutput`: what its binary output frames carry instead of the id (0: none). */
  readonly handle: number;
  private readonly log: OutputLog;
  /** Where its output bytes live until the log lets go of them (reused blocks: no allocation per read). */
  private readonly arena: ByteArena;
  private readonly limits: OutputLimits;
  /** Whether its child is read, and what its output holds under the memory budget (output-flow.ts). */
  private readonly flow: OutputFlow;
  /** Output is sent only after the process/start answer, so no client sees events of an id it was not told about. */
  private announced = false;

  /** Extension `keepLast`: the unacknowledged output kept before the oldest is dropped (undefined: it pauses instead). */
  readonly keepLastBytes: number | undefined;
  exitCode: number | null = null;
  /** Why the server gave up on the process (an output stream failed), for `process/read`. */
  failure: string | null = null;
  /** When its exit is reported (after its output, or after a grace). */
  private readonly exit = new ExitGrace();
  closed = false;

  private released = false;
  private resolveClosed!: () => void;
  /** Resolves once the process has exited and its output reached end of file. */
  readonly whenClosed = new Promise<void>((resolve) => (this.resolveClosed = resolve));
  private readonly waiters = new NewsWaiters();

  private constructor(
    spec: SpawnSpec,
    private readonly host: ProcessHost,
    /** Opens its log: new, or rebuilt for a process a successor adopted (restart adoption). */
    openLog: LogOpener,
  ) {
    super(spec.tty);
    this.id = spec.processId;
    this.tty = spec.tty;
    this.handle = spec.handle ?? 0;
    this.keepLastBytes = spec.keepLastBytes;
    this.limits = spec.limits;
    // Spare blocks given back after a quiet while: the budget learns of it.
    this.arena = new ByteArena({ onTrim: () => this.updateFlow() });
    this.log = openLog(this.arena, () => this.child?.kept);
    this.flow = new OutputFlow(this.log, this.arena, spec.limits, spec.memory, (delta) => this.host.outputHeldChanged?.(delta));
  }

  /**
   * Spawns the child through its session's `backend` (backend.ts); rejects with
   * -32603 and the OS message if it cannot start (nothing is left behind).
   */
  static async start(spec: SpawnSpec, host: ProcessHost, backend: ChildStarter): Promise<ManagedProcess> {
    const proc = new ManagedProcess(spec, host, newLog(spec));
    proc.attach(await backend.spawn(spec, proc.childEvents(spec.tty)));
    proc.updateFlow();
    return proc;
  }

  /**
   * The events of its child, as `start` and `adopt` wire them. With pipes the exit is reported
   * once they are drained (close), so output usually precedes it, but not held back forever
   * when a grandchild keeps them open; a pty's exit and close coincide. If its output can no
   * longer be read (the descriptor failed) the process cannot be followed faithfully any more:
   * it fails alone — killed (its whole tree), with the reason in `process/read`'s `failure`.
   */
  private childEvents(tty: boolean): ChildEvents {
    return {
      output: (stream, data) => this.onOutput(stream, data),
      exit: (rawExitCode) => {
        this.exit.exited(rawExitCode, tty ? undefined : () => this.recordExit());
        if (tty) this.stdin.close();
      },
      close: () => {
        this.recordExit();
        this.recordClosed();
      },
      streamError: (stream, error) => {
        this.failure ??= `${stream}: ${error.message}`;
        this.killTree();
      },
    };
  }

  /**
   * A process of a kept keeper a successor server adopted (restart adoption,
   * restart/process-kept.ts): its log rebuilt from what the keeper kept (same seqs as before),
   * its exit as the keeper knew it, the writeIds the keeper took. It was announced before: its
   * output flows when attached.
   * @internal
   */
  static adopt(spec: SpawnSpec, host: ProcessHost, adopted: Omit<AdoptedChild, 'dump'>, output: AdoptedOutput): ManagedProcess {
    const proc = new ManagedProcess(spec, host, output.openLog);
    adopted.bind(proc.childEvents(spec.tty));
    if (proc.log.exitSeq !== null && output.exitCode !== null) proc.exitCode = output.exitCode;
    if (proc.log.closeSeq !== null) {
      proc.closed = true;
      proc.resolveClosed();
    }
    proc.attach(adopted.child, output);
    proc.announced = true;
    adopted.begin();
    proc.updateFlow();
    return proc;
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

  /** `--keep-last`: a dropped run of seqs to tell the client before the next event, or undefined. */
  takeGap(): OutputGap | undefined {
    return this.announced ? this.log.takeGap() : undefined;
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
      // make a re-sent write idempotent) is small and stays for the closed retention. While
      // watchers follow the session (extension `attach`) its history stays theirs to read,
      // within --output-retention, for the closed retention.
      if (!this.host.watched) {
        this.log.dropHistory();
        this.arena.dispose(); // no more output will come: no block to keep for it
      }
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
    this.flow.squeeze();
    this.updateFlow();
  }

  /** Applies the output log's decision to the child (output-flow.ts): read it, or let it block on write. */
  updateFlow(): void {
    const finished = this.closed || this.released;
    const read = this.flow.decide({ released: this.released, finished, attached: this.host.attached, heldBack: this.host.outputHeldBack });
    if (read !== null) this.child?.setReading(read);
  }

  // ---- process/read --------------------------------------------------------------------------

  /** Resolves once there is something new after `afterSeq`, after `waitMs`, or when `signal` aborts (the asking connection closed). */
  async waitForNews(afterSeq: number, waitMs: number, signal?: AbortSignal): Promise<void> {
    const news = () => this.log.lastOutputSeq > afterSeq || this.closed || this.released || (this.log.exitSeq ?? afterSeq) > afterSeq;
    await this.waiters.wait(news, waitMs, signal);
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
    this.flow.close();
    this.waiters.wake();
    this.updateFlow();
    // Kept mode: the keeper is done waiting for a successor; it ends once its tree is gone.
    this.child?.kept?.release();
  }

  read(afterSeq: number, maxBytes: number | null): ProcessReadResult {
    const wasHolding = this.log.holding;
    const answer = this.log.read(afterSeq, maxBytes, this.limits.readCapBytes);
    // In the Codex dialect the reader now holds what it read: evictable, and the child may run.
    if (wasHolding && !this.log.holding) this.changed();
    else this.updateFlow();
    return processReadResult(answer, this.log.exitSeq !== null, this);
  }

  /**
   * A watcher's `process/read` (extension `attach`): what the log keeps after `afterSeq`, and
   * `gap` when seqs right after it are no longer kept. It acknowledges nothing and changes
   * nothing of what the session's writer is sent or held: the producer never waits for it.
   */
  watchRead(afterSeq: number, maxBytes: number | null): ProcessReadResult {
    const answer = this.log.watch(afterSeq, maxBytes, this.limits.readCapBytes);
    return watchReadResult(answer, this.log.next, this.log.exitSeq !== null, this);
  }

  /** The seq its next event will get. */
  get nextSeq(): number {
    return this.log.next;
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

  /** Whether its output is currently not read (window full, or its connection behind). */
  get isPaused(): boolean {
    return !this.flow.reading;
  }

  /** Why its output is not read now (output-flow.ts), null while it is. */
  get pauseReason(): PauseReason | null {
    return this.flow.pauseReason;
  }

  /** Bytes of its unacknowledged output on disk (the spill), not in memory. */
  get spilled(): number {
    return this.log.spilledBytes;
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
