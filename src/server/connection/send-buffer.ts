/**
 * A connection's send buffer against its marks: backpressured above the high-water mark until
 * it drains to the low one (callers of `whenDrained` wait for that), `congested` for the
 * session's pump, and room reserved for answers being built (`reserveAnswer`), so a client
 * that asks and asks without reading has about the high-water mark queued for it, not one
 * answer per request.
 *
 * No writing: the connection sends, and tells this when something was queued (`queued`) and
 * when a write reached the kernel (`wrote`). It keeps its public `backpressured` flag; this sets it.
 */

/** A connection's send-buffer marks (the server's `backpressure` option). */
export interface BackpressureMarks {
  /** Stop handing the session's events to the socket above this many buffered bytes. */
  highWaterBytes: number;
  /** Start again at or below this. */
  lowWaterBytes: number;
}

/** What the send buffer needs of its connection. */
export interface SendBufferLink {
  readonly ws: { readonly bufferedAmount: number };
  readonly closed: boolean;
  /** Above the high-water mark and not yet drained to the low one. */
  backpressured: boolean;
}

/**
 * Whether an answer of `bytes` may be built now: the send buffer plus the answers already
 * being built leave room for it under the high-water mark, or it is the only one (one always passes).
 */
export function answerFits(bufferedBytes: number, reservedBytes: number, bytes: number, highWaterBytes: number): boolean {
  return reservedBytes === 0 || bufferedBytes + reservedBytes + bytes <= highWaterBytes;
}

export class SendBuffer {
  /** Callers of `whenDrained` waiting for the send buffer to fall below the low-water mark. */
  private drainWaiters: Array<() => void> = [];
  /** Bytes reserved for answers being built (admitted by `reserveAnswer`, not yet handed to the socket). */
  private answerBytes = 0;
  /** Callers of `reserveAnswer` waiting for a reserved answer to be sent. */
  private answerWaiters: Array<() => void> = [];

  constructor(
    private readonly link: SendBufferLink,
    private readonly marks: BackpressureMarks,
  ) {}

  /** At or above the high-water mark (or gone): the session's events wait. */
  get congested(): boolean {
    return this.link.closed || this.link.ws.bufferedAmount >= this.marks.highWaterBytes;
  }

  /** Something was queued: above the high-water mark, it is backpressured until it drains to the low one. */
  queued(): void {
    if (!this.link.backpressured && this.link.ws.bufferedAmount > this.marks.highWaterBytes) this.link.backpressured = true;
  }

  /**
   * A write reached the kernel (send callbacks run in order: the place to notice the buffer
   * drained). True when the buffer is at or below the low-water mark: the waiters were woken.
   */
  wrote(): boolean {
    if (this.link.ws.bufferedAmount > this.marks.lowWaterBytes) return false;
    if (this.link.backpressured) {
      this.link.backpressured = false;
      this.wakeDrainWaiters();
    }
    return true;
  }

  /** Resolves once the send buffer is below the low-water mark (at once if it is, or if the socket is gone). */
  whenDrained(): Promise<void> {
    if (!this.link.backpressured || this.link.closed) return Promise.resolve();
    return new Promise((resolve) => this.drainWaiters.push(resolve));
  }

  /**
   * Waits until an answer of `bytes` fits (`answerFits`), then reserves them (added to
   * `holder.answerBytes`) until `answerSent`. Nothing is reserved once the socket is gone.
   */
  async reserveAnswer(holder: { answerBytes?: number }, bytes: number): Promise<void> {
    for (;;) {
      if (this.link.closed) return;
      if (this.link.backpressured) {
        await this.whenDrained();
        // The buffer drained: the first answer waiting goes now, even if the session's events
        // refilled it meanwhile (else a streaming process could starve reads forever).
        if (this.answerBytes === 0 || this.link.closed) break;
        continue;
      }
      if (answerFits(this.link.ws.bufferedAmount, this.answerBytes, bytes, this.marks.highWaterBytes)) break;
      await new Promise<void>((resolve) => this.answerWaiters.push(resolve));
    }
    this.answerBytes += bytes;
    holder.answerBytes = (holder.answerBytes ?? 0) + bytes;
  }

  /** A reserved answer was sent (or its request settled): those waiting for room look again. */
  answerSent(bytes: number): void {
    this.answerBytes -= bytes;
    const waiters = this.answerWaiters;
    this.answerWaiters = [];
    for (const wake of waiters) wake();
  }

  /** The socket is gone: everyone waiting for it to drain goes on. */
  wakeDrainWaiters(): void {
    const waiters = this.drainWaiters;
    this.drainWaiters = [];
    for (const wake of waiters) wake();
  }
}
