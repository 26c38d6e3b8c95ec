/**
 * `ExecProcess`: a remote process in Node's `child_process` idiom. It owns no I/O: the
 * client feeds it ordered events and performs its writes, signals and terminate through
 * `ProcessHost`, so the handle survives any number of reconnects unchanged.
 */
import { EventEmitter } from 'node:events';
import { Readable, Writable } from 'node:stream';
import type { OutputStream, SignalName } from '../../protocol/index.js';
import { OutputLostError } from '../errors.js';
import { ProcessOutput } from './process-output.js';
import { Sequencer, type Gap, type ProcessEvent, type SequencedEvent } from '../sequencer.js';
import type { ProcessReadResult } from '../../protocol/index.js';
import { protocolSignal } from '../../protocol/signals.js';
// A failure is also reported through events and streams: deferreds here are always observed.
import { deferred } from '../../util/deferred.js';
import type { ByteArena } from '../../util/byte-arena.js';

export type { ProcessEvent } from '../sequencer.js';
export { OUTPUT_HIGH_WATER_MARK } from './process-output.js';

/** What a process handle needs from its client. */
export interface ProcessHost {
  writeStdin(process: ExecProcess, data: Buffer): Promise<void>;
  closeStdin(process: ExecProcess): Promise<void>;
  signal(process: ExecProcess, signal: SignalName): Promise<void>;
  /** `kill`: send `signal` without waiting; a failure is the process's 'error' (if listened to). */
  kill(process: ExecProcess, signal: SignalName): void;
  terminate(process: ExecProcess): Promise<boolean>;
  resize(process: ExecProcess, cols: number, rows: number): Promise<boolean>;
  /** A later event arrived before an earlier one: ask the server for what is missing. */
  fillHole(process: ExecProcess): void;
  /** The handle gave up on a process that may still run (lost output): kill it, no leaks. */
  abandon(process: ExecProcess): void;
  /** Flow control: output was buffered on `stream`, or a consumer asked for more. */
  outputBuffered(stream: Readable | Writable): void;
  outputWanted(): void;
  /**
   * The consumer has taken every event up to `seq` (`bytes` of output since the last call;
   * `final`: up to the close): what the `acks` extension tells the server.
   */
  consumed(process: ExecProcess, seq: number, bytes: number, final: boolean): void;
}

export interface ExecProcessOptions {
  tty: boolean;
  pipeStdin: boolean;
  /** Write stdout (all output of a tty) here instead of `stdout`; acknowledged once written. */
  stdoutSink?: Writable;
  /** Write stderr here instead of `stderr`; acknowledged once written. */
  stderrSink?: Writable;
  /**
   * A watcher's handle (extension `attach`): why it is read-only. Its `stdin` throws this on
   * every write, as its host does for kill, signal, terminate and resize.
   */
  readOnly?: string;
}


/** `ExecProcess`'s events and their arguments (as `ChildProcess`'s, where they share a name). */
export interface ExecProcessEventMap {
  /** The server confirmed the start (or was found to have the process). */
  spawn: [unused?: undefined];
  /** The exit code (128+N when killed by signal N); output may still follow until 'close'. */
  exit: [exitCode: number];
  /** The process exited and all its output was delivered. */
  close: [exitCode: number | null];
  /**
   * The handle failed (spawn refused, output lost, session lost), or a `kill` could not be
   * delivered. Emitted only when someone listens: `exited`/`closed` report failures too.
   */
  error: [error: Error];
  /**
   * `--keep-last` (`keepLast` in spawn's options): the server dropped the output events
   * `fromSeq`..`toSeq` (inclusive) unread to keep the newest; what follows is exact. Emitted
   * once per range, before the events after it.
   */
  gap: [gap: OutputGapEvent];
}

/** A range of output events the server dropped (`--keep-last`): seqs `fromSeq`..`toSeq`, inclusive. */
export interface OutputGapEvent {
  fromSeq: number;
  toSeq: number;
}

/** A signal `kill` takes: a Node name or number the protocol has, or the protocol's own name. */
export type KillSignal = NodeJS.Signals | number | SignalName;

/**
 * What the client's own modules reach in a handle; not members of the public class (set by
 * ExecProcess's static block; use the functions below).
 */
interface Internals {
  sequencer(p: ExecProcess): Sequencer;
  started(p: ExecProcess): boolean;
  startedPromise(p: ExecProcess): Promise<void>;
  live(p: ExecProcess): boolean;
  outputMemory(p: ExecProcess, stream: OutputStream): ByteArena | null;
  mergeRead(p: ExecProcess, afterSeq: number, result: ProcessReadResult): void;
  adopt(p: ExecProcess, afterSeq: number): void;
  fail(p: ExecProcess, error: Error): void;
  outputStreams(p: ExecProcess): (Readable | Writable)[];
}
let internals: Internals;

export class ExecProcess extends EventEmitter<ExecProcessEventMap> {
  readonly id: string;
  readonly argv: readonly string[];
  readonly tty: boolean;
  /** stdout, and all pty output when `tty` is set. */
  readonly stdout: Readable;
  readonly stderr: Readable;
  /** Remote stdin (null unless `tty` or `pipeStdin`). `write`'s callback fires once the server accepted the bytes. */
  readonly stdin: Writable | null;
  /** Resolves with the exit code (128+N when killed by signal N). */
  readonly exited: Promise<number>;
  /** Resolves once the process exited and all its output was delivered. */
  readonly closed: Promise<void>;
  /** Exit code once known, like `ChildProcess.exitCode`. */
  exitCode: number | null = null;
  /** Set when the handle failed (spawn error, lost output, lost session). */
  error: Error | null = null;

  readonly #sequencer = new Sequencer();
  /** True once the server confirmed (or was found to have) the process. */
  #started = false;

  private readonly startDeferred = deferred<void>();
  private readonly exitDeferred = deferred<number>();
  private readonly closeDeferred = deferred<void>();
  private finished = false;
  /** The output streams or sinks, the iterators, and what the consumer took. */
  private readonly output: ProcessOutput;

  /** @internal created by `ExecClient.spawn`. */
  constructor(
    id: string,
    argv: readonly string[],
    options: ExecProcessOptions,
    private readonly host: ProcessHost,
  ) {
    super();
    this.id = id;
    this.argv = argv;
    this.tty = options.tty;
    this.exited = this.exitDeferred.promise;
    this.closed = this.closeDeferred.promise;
    this.output = new ProcessOutput(options, this.#sequencer, {
      outputBuffered: (stream) => host.outputBuffered(stream),
      outputWanted: () => host.outputWanted(),
      consumed: (seq, bytes, final) => host.consumed(this, seq, bytes, final),
    });
    this.stdout = this.output.stdout;
    this.stderr = this.output.stderr;
    this.stdin = options.readOnly !== undefined
      ? readOnlyStdin(options.readOnly)
      : options.tty || options.pipeStdin
        ? new Writable({
            highWaterMark: 64 * 1024,
            writev: (chunks, callback) => {
              const data = Buffer.concat(chunks.map((c) => toBuffer(c.chunk, c.encoding)));
              host.writeStdin(this, data).then(() => callback(), callback);
            },
            final: (callback) => {
              host.closeStdin(this).then(() => callback(), callback);
            },
          })
        : null;
    // Failures are also visible through `exited`/`closed`; an unobserved stream error must
    // not crash the host program (a dropped network is not a programming error).
    for (const stream of [this.stdout, this.stderr, this.stdin]) stream?.on('error', () => {});
  }

  /**
   * Sends `signal` to the remote process, shaped like `ChildProcess.kill`: returns true if
   * the signal was sent (or queued: while recovering, or before the start was confirmed),
   * false if the process is already gone (exited, closed or failed). Node's names and numbers
   * map to the protocol's (`SIGINT` → `interrupt`, `SIGTERM` → `terminate`, `SIGKILL` →
   * `kill`, `SIGHUP`, `SIGQUIT`, `SIGUSR1`, `SIGUSR2`); the protocol's names are taken as
   * they are; any other signal throws a TypeError, as Node does for an unknown one.
   *
   * Against a Codex exec-server (a server that accepted no tether extension), which knows
   * only `interrupt`: `SIGTERM` and `SIGKILL` become `process/terminate`, which kills the
   * process at once (exit 137: no chance to clean up, unlike tether's SIGTERM, exit 143);
   * `SIGINT` is sent as `interrupt`; other signals are refused by the server.
   *
   * Nothing is awaited. A signal the server refuses is emitted as 'error' when the process
   * has an 'error' listener, and otherwise ignored (Node emits it when it cannot deliver a
   * signal); a lost session is reported by `exited` and `closed`. To await the answer use
   * `signal()`, or `terminate()` to kill.
   */
  kill(signal: KillSignal = 'SIGTERM'): boolean {
    const name = toProtocolSignal(signal);
    if (!this.#live || this.#sequencer.exitSeen) return false;
    this.host.kill(this, name);
    return true;
  }

  /**
   * Sends a protocol signal (`interrupt`, the only one Codex knows; tether also takes
   * `terminate`, `kill`, `hangup`, `quit`, `user1`, `user2`) and resolves once the server
   * answered; rejects with its refusal (a Codex server refuses all but `interrupt`). Resolves
   * at once if the process already exited. Re-sent after a lost answer only while it runs.
   */
  signal(signal: SignalName): Promise<void> {
    return this.host.signal(this, signal);
  }

  /**
   * Sets the remote terminal's size (a `tty` process; extension `processResize`). Resolves
   * false when the server cannot (a Codex exec-server: the terminal stays 80x24). Calls in
   * quick succession are coalesced: the last size wins, none overtakes another.
   */
  resize(cols: number, rows: number): Promise<boolean> {
    if (!this.tty) return Promise.reject(new TypeError('resize: this process has no terminal (spawn it with tty: true)'));
    for (const [name, value] of [['cols', cols], ['rows', rows]] as const) {
      if (!Number.isInteger(value) || value < 1 || value > 65535) {
        return Promise.reject(new RangeError(`resize: ${name} must be an integer in 1..65535 (got ${String(value)})`));
      }
    }
    return this.host.resize(this, cols, rows);
  }

  /**
   * Kills the process (`process/terminate`, in both dialects: exit 137) and resolves `true`
   * if it was running, false if it had already exited (or never started).
   */
  terminate(): Promise<boolean> {
    return this.host.terminate(this);
  }

  /**
   * Ordered events from the moment iteration starts (start it in the tick of `spawn` to see
   * all). Iterating consumes the output: streams nobody else reads are set flowing (their
   * data goes to the iterator only), so they do not hold the process back.
   */
  [Symbol.asyncIterator](): AsyncIterator<ProcessEvent> {
    return this.output.iterate(this.finished, this.error);
  }

  // ---- driven by the client ------------------------------------------------------------

  /** @internal the server has the process. */
  markStarted(): void {
    if (this.#started || this.finished) return;
    this.#started = true;
    this.startDeferred.resolve();
    this.emit('spawn');
    // A hole seen before the start was confirmed could not be filled yet.
    if (this.#sequencer.hasHole) this.host.fillHole(this);
  }

  /** @internal one event from a notification. */
  accept(event: SequencedEvent, memory: ByteArena | null = null): void {
    if (this.finished || (memory && !this.#sequencer.accepts(event.seq))) {
      if (memory && event.type === 'output') memory.releaseAll(event.parts ?? [event.data]);
      return;
    }
    if (memory && event.type === 'output') event.memory = memory;
    // An event for this id proves the server started it, even when its notifications overtook
    // the process/start answer (both can arrive in one read; a quick command may even close
    // first): 'spawn' still comes first, as with Node's ChildProcess.
    if (!this.#started) this.markStarted();
    const events = this.#sequencer.push(event);
    this.#reportSkipped();
    this.deliver(events);
    if (!this.finished && this.#sequencer.hasHole) this.host.fillHole(this);
  }

  /** @internal `process/gap` (extension `keepLast`): seqs `first`..`last` were dropped by the server. */
  acceptGap(first: number, last: number): void {
    if (this.finished) return;
    if (!this.#started) this.markStarted();
    const events = this.#sequencer.skip(first, last);
    this.#reportSkipped();
    this.deliver(events);
    if (!this.finished && this.#sequencer.hasHole) this.host.fillHole(this);
  }

  #reportSkipped(): void {
    for (const gap of this.#sequencer.takeSkipped()) this.emit('gap', { fromSeq: gap.fromSeq, toSeq: gap.toSeq });
  }

  /**
   * Where the demux may copy this process's output of `stream` (client/frame-demux.ts):
   * reused memory when it goes to a sink that is done with a chunk once its write completed
   * (a socket, pipe, terminal or file stream: the kernel has the bytes) and nobody iterates
   * the events; else null (owned Buffers: a consumer may keep them).
   */
  #outputMemory(stream: OutputStream): ByteArena | null {
    return this.finished ? null : this.output.memoryFor(stream);
  }

  /**
   * A process the client did not start (extension `attach`): it runs on the server, and its
   * events are followed from the one after `afterSeq` (what its writer acknowledged, or 0).
   */
  #adopt(afterSeq: number): void {
    this.#sequencer.lastDelivered = afterSeq;
    this.markStarted();
  }

  /** A `process/read` answer for `afterSeq`. */
  #mergeRead(afterSeq: number, result: ProcessReadResult): void {
    if (this.finished) return;
    // Extension `attach`: seqs the server no longer holds (history evicted) are said as a
    // gap, like a keep-last drop: reported, never a failure; what follows is exact.
    const told = (result as { gap?: { firstSeq?: unknown; lastSeq?: unknown } | null }).gap;
    if (told && typeof told.firstSeq === 'number' && typeof told.lastSeq === 'number' && told.firstSeq <= told.lastSeq) {
      const skipped = this.#sequencer.skip(told.firstSeq, told.lastSeq);
      this.#reportSkipped();
      this.deliver(skipped);
      if (this.finished) return;
      afterSeq = Math.max(afterSeq, told.lastSeq);
    }
    const { events, gap } = this.#sequencer.mergeRead(afterSeq, result);
    if (gap) {
      this.#fail(lostError(this.id, gap));
      this.host.abandon(this);
      return;
    }
    this.deliver(events);
  }

  /** The process can no longer be followed (start refused, output lost, session lost). */
  #fail(error: Error): void {
    if (this.finished) return;
    this.finished = true;
    this.error = error;
    this.startDeferred.reject(error);
    this.exitDeferred.reject(error);
    this.closeDeferred.reject(error);
    // End (not destroy) the output streams: what was delivered stays readable; the failure
    // is reported by `exited`, `closed`, the iterator and the 'error' event.
    this.output.endStreams();
    this.stdin?.destroy(error);
    this.output.finish(error);
    if (this.listenerCount('error') > 0) this.emit('error', error);
  }

  /** Where its output goes: the streams, or the destinations given to spawn. */
  get #outputStreams(): (Readable | Writable)[] {
    return this.output.destinations;
  }

  /** True while the handle still expects events. */
  get #live(): boolean {
    return !this.finished;
  }

  static {
    internals = {
      sequencer: (p) => p.#sequencer,
      started: (p) => p.#started,
      startedPromise: (p) => p.startDeferred.promise,
      live: (p) => p.#live,
      outputMemory: (p, stream) => p.#outputMemory(stream),
      mergeRead: (p, afterSeq, result) => p.#mergeRead(afterSeq, result),
      adopt: (p, afterSeq) => p.#adopt(afterSeq),
      fail: (p, error) => p.#fail(error),
      outputStreams: (p) => p.#outputStreams,
    };
  }

  private deliver(events: SequencedEvent[]): void {
    if (events.length === 0) return;
    for (const event of events) {
      this.output.toIterators(event);
      switch (event.type) {
        case 'output':
          this.output.write(event);
          break;
        case 'exit':
          this.exitCode = event.exitCode;
          this.exitDeferred.resolve(event.exitCode);
          this.emit('exit', event.exitCode);
          break;
        case 'close':
          this.finished = true;
          this.output.endStreams();
          // Nothing can be written any more; end quietly rather than fail pending writes later.
          if (this.stdin && !this.stdin.writableEnded) this.stdin.destroy();
          if (this.exitCode === null) {
            // Defensive: a close without an exit would leave `exited` pending forever.
            this.exitDeferred.reject(new Error(`process ${this.id} closed without an exit status`));
          }
          this.closeDeferred.resolve();
          this.output.finish();
          this.output.reportConsumed();
          this.emit('close', this.exitCode);
          return;
      }
    }
    this.output.reportConsumed();
  }
}

/** A watcher's stdin: every write throws `reason` (a watcher cannot write to the process). */
function readOnlyStdin(reason: string): Writable {
  const stdin = new Writable({ write: (_chunk, _encoding, callback) => callback(new Error(reason)) });
  const refuse = (): never => {
    throw new Error(reason);
  };
  stdin.write = refuse;
  stdin.end = refuse;
  return stdin;
}

function toProtocolSignal(signal: KillSignal): SignalName {
  const name = protocolSignal(signal);
  if (!name) throw new TypeError(`kill: unknown or unsupported signal ${String(signal)}`);
  return name;
}

function lostError(processId: string, gap: Gap): OutputLostError {
  return new OutputLostError(processId, gap.fromSeq, gap.toSeq);
}

function toBuffer(chunk: unknown, encoding: BufferEncoding | 'buffer'): Buffer {
  if (Buffer.isBuffer(chunk)) return chunk;
  if (typeof chunk === 'string') return Buffer.from(chunk, encoding === 'buffer' ? 'utf8' : encoding);
  return Buffer.from(chunk as Uint8Array);
}

// ---- for the client's own modules (not exported by the package) ----------------------------

/** The handle's event sequencer (ordering, holes, exit seen). */
export const sequencerOf = (p: ExecProcess): Sequencer => internals.sequencer(p);
/** True once the server confirmed (or was found to have) the process. */
export const isStarted = (p: ExecProcess): boolean => internals.started(p);
/** Resolves when started; rejects if the start failed. */
export const whenStarted = (p: ExecProcess): Promise<void> => internals.startedPromise(p);
/** True while the handle still expects events. */
export const isLive = (p: ExecProcess): boolean => internals.live(p);
/** Where the demux may copy `p`'s output of `stream` (client/frame-demux.ts), or null. */
export const outputMemoryOf = (p: ExecProcess, stream: OutputStream): ByteArena | null => internals.outputMemory(p, stream);
/** Hands `p` a `process/read` answer for `afterSeq`. */
export const mergeRead = (p: ExecProcess, afterSeq: number, result: ProcessReadResult): void => internals.mergeRead(p, afterSeq, result);
/** A process `p`'s client did not start (extension `attach`): followed from the event after `afterSeq`. */
export const adoptProcess = (p: ExecProcess, afterSeq: number): void => internals.adopt(p, afterSeq);
/** `p` can no longer be followed (start refused, output lost, session lost). */
export const failProcess = (p: ExecProcess, error: Error): void => internals.fail(p, error);
/** Where `p`'s output goes: its streams, or the destinations given to spawn. */
export const outputStreamsOf = (p: ExecProcess): (Readable | Writable)[] => internals.outputStreams(p);
