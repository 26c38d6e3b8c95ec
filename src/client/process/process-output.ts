/**
 * Where one process's output goes and how far its consumer got: the `stdout`/`stderr`
 * streams or the sinks given to spawn, the async iterators following its events, and the
 * bookkeeping that tells the client what was consumed (so `acks` slows a process nobody
 * reads). `ExecProcess` owns one and hands it its ordered output events.
 */
import { WriteStream } from 'node:fs';
import { Socket } from 'node:net';
import { Readable, type Writable } from 'node:stream';
import type { OutputStream } from '../../protocol/index.js';
import { ByteArena } from '../../util/byte-arena.js';
import { outputEvent, type ProcessEvent, type SequencedEvent, type Sequencer } from '../sequencer.js';

/**
 * Each output stream buffers up to this much for a consumer that is behind before the
 * process counts as not consuming (then `acks` stops acknowledging it and the server stops
 * reading the remote process once its window is full).
 */
export const OUTPUT_HIGH_WATER_MARK = 256 * 1024;

/**
 * Set to true on a sink (`stdout`/`stderr` of spawn) that is done with a chunk once its write
 * completed, as a socket or a file stream is: its output may then be copied into reused
 * memory (`memoryFor`). The relay's sinks (relay/remote-output.ts) copy every chunk into their
 * own log before completing its write.
 */
export const doneWhenWritten = Symbol('tether.doneWhenWritten');

type OutputEvent = Extract<SequencedEvent, { type: 'output' }>;
type IteratorSink = { push(event: ProcessEvent): void; end(error?: Error): void };

/** What the output plumbing tells its process's client (flow control and acknowledgements). */
export interface OutputOwner {
  /** Output was buffered on `stream`. */
  outputBuffered(stream: Readable | Writable): void;
  /** A consumer asked for more. */
  outputWanted(): void;
  /** The consumer has taken every event up to `seq` (`bytes` of output since the last call; `final`: up to the close). */
  consumed(seq: number, bytes: number, final: boolean): void;
}

export class ProcessOutput {
  /** stdout, and all pty output of a tty. */
  readonly stdout: Readable;
  readonly stderr: Readable;
  private readonly iterators = new Set<IteratorSink>();
  private readonly stdoutSink: Writable | undefined;
  private readonly stderrSink: Writable | undefined;
  /** Readable mode: the first output seq pushed into a stream that was full (not consumed yet), and the full streams. */
  private blockedFrom: number | null = null;
  private readonly fullStreams = new Set<Readable>();
  /** Sink mode: output seqs whose write has not completed, in order. */
  private readonly writing: number[] = [];
  private readonly written = new Set<number>();
  /** Sink mode: reused memory the demux copies this process's output into (made on first use). */
  private arena: ByteArena | null = null;
  /** Highest seq reported consumed. */
  private consumedSeq = 0;
  /**
   * Output delivered and not yet reported consumed: (seq, bytes) pairs in seq order, from
   * `unreportedHead`. Reported by what was consumed, not what was delivered: a sink that
   * lags behind its deliveries still sends an ack per quarter window as its writes complete,
   * rather than one for everything delivered and then nothing until the ack timer.
   */
  private readonly unreported: number[] = [];
  private unreportedHead = 0;

  constructor(
    sinks: { stdoutSink?: Writable; stderrSink?: Writable },
    private readonly sequencer: Sequencer,
    private readonly owner: OutputOwner,
  ) {
    // Output cannot be refused, only slowed. With `acks`, output a consumer has not taken
    // (beyond the stream's high-water mark) is not acknowledged, so the server stops the
    // remote process; `read()` (called when the consumer wants more) acknowledges again.
    // Against a server without acks, `outputHighWaterMark` pauses the whole socket instead.
    this.stdoutSink = sinks.stdoutSink;
    this.stderrSink = sinks.stderrSink;
    this.stdout = new Readable({ highWaterMark: OUTPUT_HIGH_WATER_MARK, read: () => this.consumerWants(this.stdout) });
    this.stderr = new Readable({ highWaterMark: OUTPUT_HIGH_WATER_MARK, read: () => this.consumerWants(this.stderr) });
    // With a destination given, the stream stays empty: let it flow, so it ends at close.
    if (this.stdoutSink) this.stdout.resume();
    if (this.stderrSink) this.stderr.resume();
  }

  /** Where the output goes: the streams, or the destinations given to spawn. */
  get destinations(): (Readable | Writable)[] {
    return [this.stdoutSink ?? this.stdout, this.stderrSink ?? this.stderr];
  }

  /**
   * Where the demux may copy the output of `stream` (client/frame-demux.ts): reused memory
   * when it goes to a sink that is done with a chunk once its write completed (a socket,
   * pipe, terminal or file stream: the kernel has the bytes) and nobody iterates the events;
   * else null (owned Buffers: a consumer may keep them).
   */
  memoryFor(stream: OutputStream): ByteArena | null {
    const sink = stream === 'stderr' ? this.stderrSink : this.stdoutSink;
    if (!sink || this.iterators.size > 0) return null;
    if (!(sink instanceof Socket || sink instanceof WriteStream || (sink as { [doneWhenWritten]?: boolean })[doneWhenWritten] === true)) return null;
    return (this.arena ??= new ByteArena());
  }

  /**
   * Ordered events from now on (`ended`: none will come; `error`: why). Iterating consumes
   * the output: streams nobody else reads are set flowing (their data goes to the iterator
   * only), so they do not hold the process back.
   */
  iterate(ended: boolean, error: Error | null): AsyncIterator<ProcessEvent> {
    for (const stream of [this.stdout, this.stderr]) if (stream.readableFlowing === null) stream.resume();
    const queue: ProcessEvent[] = [];
    let done = false;
    let failure: Error | undefined;
    let wake: (() => void) | undefined;
    const sink: IteratorSink = {
      push(event) {
        queue.push(event);
        wake?.();
      },
      end(error) {
        done = true;
        failure = error;
        wake?.();
      },
    };
    if (ended) sink.end(error ?? undefined);
    else this.iterators.add(sink);
    return {
      next: async (): Promise<IteratorResult<ProcessEvent>> => {
        for (;;) {
          if (queue.length > 0) return { value: queue.shift()!, done: false };
          if (done) {
            if (failure) throw failure;
            return { value: undefined, done: true };
          }
          await new Promise<void>((resolve) => (wake = resolve));
          wake = undefined;
        }
      },
      return: async (): Promise<IteratorResult<ProcessEvent>> => {
        this.iterators.delete(sink);
        done = true;
        return { value: undefined, done: true };
      },
    };
  }

  /** Hands one delivered event to the iterators: an owned copy, never a view into reused memory. */
  toIterators(event: SequencedEvent): void {
    if (this.iterators.size === 0) return;
    const owned = event.type === 'output' && event.memory ? outputEvent(event.seq, event.stream, [Buffer.concat(event.parts ?? [event.data])]) : event;
    for (const sink of this.iterators) sink.push(owned);
  }

  /** Writes one delivered output event to its sink, or pushes it into its stream. */
  write(event: OutputEvent): void {
    // Pieces (binary frames) are passed on as they are: joining them would copy every byte.
    const parts = event.parts ?? [event.data];
    const last = parts.length - 1;
    let bytes = 0;
    for (const part of parts) bytes += part.length;
    this.unreported.push(event.seq, bytes);
    const sink = event.stream === 'stderr' ? this.stderrSink : this.stdoutSink;
    if (sink) {
      const seq = event.seq;
      this.writing.push(seq);
      // Corked, the pieces leave in one writev rather than one write each.
      if (last > 0) sink.cork();
      for (let i = 0; i < last; i++) sink.write(parts[i]);
      // A failed write (EPIPE) counts as taken: the bytes have nowhere else to go.
      let settled = false;
      const memory = event.memory;
      sink.write(parts[last], () => {
        // Once: Node may run a corked batch's callbacks twice when the sink fails (EPIPE).
        if (settled) return;
        settled = true;
        memory?.releaseAll(parts);
        this.sinkWritten(seq);
      });
      if (last > 0) sink.uncork();
      this.owner.outputBuffered(sink);
      return;
    }
    const stream = event.stream === 'stderr' ? this.stderr : this.stdout;
    if (event.memory) {
      // Not expected (reused memory is for sinks only), but a stream's reader keeps its chunks.
      const data = Buffer.concat(parts);
      event.memory.releaseAll(parts);
      if (!stream.push(data)) {
        this.fullStreams.add(stream);
        this.blockedFrom ??= event.seq;
      }
      this.owner.outputBuffered(stream);
      return;
    }
    for (let i = 0; i < last; i++) stream.push(parts[i]);
    if (!stream.push(parts[last])) {
      this.fullStreams.add(stream);
      this.blockedFrom ??= event.seq;
    }
    this.owner.outputBuffered(stream);
  }

  /** No more output: the streams end (what was delivered stays readable). */
  endStreams(): void {
    this.stdout.push(null);
    this.stderr.push(null);
  }

  /**
   * The process is done with: its reused memory is released (writes still in progress keep
   * their blocks until they complete) and the iterators end, with `error` if it failed.
   */
  finish(error?: Error): void {
    this.arena?.dispose();
    for (const sink of this.iterators) sink.end(error);
    this.iterators.clear();
  }

  /** Tells the owner how far the consumer got: every delivered event before the first one not taken. */
  reportConsumed(): void {
    let upTo = this.sequencer.lastDelivered;
    if (this.blockedFrom !== null) upTo = Math.min(upTo, this.blockedFrom - 1);
    if (this.writing.length > 0) upTo = Math.min(upTo, this.writing[0]! - 1);
    if (upTo <= this.consumedSeq) return;
    this.consumedSeq = upTo;
    this.owner.consumed(upTo, this.takeUnreportedBytes(upTo), this.sequencer.done && upTo === this.sequencer.lastDelivered);
  }

  /** Sink mode: a write completed (writes complete in order per sink, not across two). */
  private sinkWritten(seq: number): void {
    this.written.add(seq);
    while (this.writing.length > 0 && this.written.delete(this.writing[0]!)) this.writing.shift();
    this.reportConsumed();
  }

  /**
   * Readable mode: `stream`'s consumer wants more (Node calls `read()` once what it buffers
   * is below the high-water mark); once no stream is full, everything delivered is taken.
   */
  private consumerWants(stream: Readable): void {
    this.owner.outputWanted();
    this.fullStreams.delete(stream);
    if (this.blockedFrom === null || this.fullStreams.size > 0) return;
    this.blockedFrom = null;
    this.reportConsumed();
  }

  /** The output bytes of the delivered events up to `seq`, now reported. */
  private takeUnreportedBytes(seq: number): number {
    const pairs = this.unreported;
    let at = this.unreportedHead;
    let bytes = 0;
    while (at < pairs.length && pairs[at]! <= seq) {
      bytes += pairs[at + 1]!;
      at += 2;
    }
    if (at === pairs.length) {
      pairs.length = 0;
      at = 0;
    } else if (at >= 1024) {
      pairs.splice(0, at); // now and then, not per ack: the array stays small and the cost O(1) per event
      at = 0;
    }
    this.unreportedHead = at;
    return bytes;
  }
}
