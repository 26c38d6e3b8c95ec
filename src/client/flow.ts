/**
 * Codex flow control (option `outputHighWaterMark`; not used with `acks`, where each process
 * is flow-controlled on its own): when a consumed output stream holds more than the mark,
 * the socket is paused until every consumed stream is down to half of it.
 */
import { Readable, type Writable } from 'node:stream';

export interface FlowHost {
  /** The high-water mark, or undefined (off). */
  readonly limit: number | undefined;
  /** True when the session has `acks` (then this is not used). */
  acks(): boolean;
  /** Every output stream or destination of every followed process. */
  streams(): Iterable<Readable | Writable>;
  /** Pause or resume reading the current socket. */
  pause(): void;
  resume(): void;
  /** The public 'flow' event. */
  changed(paused: boolean): void;
}

export class CodexFlow {
  /** The current socket is paused because a consumer is behind. */
  private paused = false;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly host: FlowHost) {}

  get isPaused(): boolean {
    return this.paused;
  }

  /** Output was buffered on `stream`: pause if it is now behind. */
  outputBuffered(stream: Readable | Writable): void {
    const limit = this.host.limit;
    if (limit === undefined || this.paused || this.host.acks()) return;
    if (!isBehind(stream, limit)) return;
    this.paused = true;
    this.host.pause();
    // A Readable calls read() once per shortfall, not on every chunk taken, so also look
    // now and then: consumers drain at their own pace.
    this.timer = setInterval(() => this.outputWanted(), 20);
    this.timer.unref();
    this.host.changed(true);
  }

  /** A consumer wants more: resume once every consumed stream is down to half the mark. */
  outputWanted(): void {
    if (!this.paused) return;
    const low = (this.host.limit ?? 0) / 2;
    for (const stream of this.host.streams()) if (isBehind(stream, low)) return;
    this.paused = false;
    clearInterval(this.timer);
    this.host.resume();
    this.host.changed(false);
  }

  dispose(): void {
    clearInterval(this.timer);
  }
}

/** A consumed stream (read, piped, or a destination written to) holds more than `limit` bytes. */
function isBehind(stream: Readable | Writable, limit: number): boolean {
  if (stream.destroyed) return false;
  if (stream instanceof Readable) return stream.readableFlowing !== null && stream.readableLength > limit;
  return (stream as Writable).writableLength > limit;
}
