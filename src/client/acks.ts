/**
 * The client side of the `acks` extension: per process, what the consumer has taken, told
 * to the server as `process/ack {processId, seq}` (cumulative), batched — at once when a
 * quarter of the server's window has become acknowledgeable, otherwise within 20 ms — and
 * at once for the close event (the server then forgets the process). The server stops
 * reading a child once `outputWindow` bytes of it are unacknowledged, so these messages are
 * the flow control: a consumer that stops taking output stops its process, and only its.
 * Pure bookkeeping around an injected `send`; timers are the only side effect.
 */

export interface AckSender {
  /** Sends `process/ack` now if a connection can take it; false if none can (it is re-sent by `flushAll`). */
  (processId: string, seq: number): boolean;
}

interface ProcessAcks {
  /** Highest seq the consumer has taken (acknowledgeable). */
  consumed: number;
  /** Highest seq told to the server. */
  sent: number;
  /** Output bytes consumed since the last ack sent. */
  pendingBytes: number;
  timer: NodeJS.Timeout | undefined;
  /** The close was consumed: once that is told, nothing of the process is left to tell. */
  final: boolean;
}

export const ACK_DELAY_MS = 20;

export class Acknowledger {
  private readonly processes = new Map<string, ProcessAcks>();
  private batchBytes: number;

  constructor(
    private readonly send: AckSender,
    windowBytes: number,
    private readonly delayMs = ACK_DELAY_MS,
  ) {
    this.batchBytes = Math.max(1, Math.floor(windowBytes / 4));
  }

  /** The server's window (from `initialize`): acks go at least every quarter of it. */
  setWindow(windowBytes: number): void {
    this.batchBytes = Math.max(1, Math.floor(windowBytes / 4));
  }

  /**
   * The consumer of `processId` has taken everything up to `seq` (`bytes` of output since the
   * previous call). `final`: the close event — acknowledged at once.
   */
  consumed(processId: string, seq: number, bytes: number, final = false): void {
    let p = this.processes.get(processId);
    if (!p) {
      p = { consumed: 0, sent: 0, pendingBytes: 0, timer: undefined, final: false };
      this.processes.set(processId, p);
    }
    if (seq <= p.consumed) return;
    p.consumed = seq;
    p.pendingBytes += bytes;
    p.final ||= final;
    if (final || p.pendingBytes >= this.batchBytes) this.flush(processId, p);
    else p.timer ??= setTimeout(() => this.flush(processId, p), this.delayMs);
  }

  /** Highest seq the consumer of `processId` has taken. */
  consumedSeq(processId: string): number {
    return this.processes.get(processId)?.consumed ?? 0;
  }

  /** After a reconnect: tell the server again where every process stands (acks may have been lost with the socket). */
  flushAll(): void {
    for (const [id, p] of this.processes) {
      p.sent = 0;
      this.flush(id, p);
    }
  }

  /** The process is gone for good (closed and acknowledged, or failed): nothing more to tell. */
  forget(processId: string): void {
    const p = this.processes.get(processId);
    if (p) clearTimeout(p.timer);
    this.processes.delete(processId);
  }

  dispose(): void {
    for (const p of this.processes.values()) clearTimeout(p.timer);
    this.processes.clear();
  }

  private flush(processId: string, p: ProcessAcks): void {
    clearTimeout(p.timer);
    p.timer = undefined;
    if (p.consumed <= p.sent) return;
    if (this.send(processId, p.consumed)) {
      p.sent = p.consumed;
      p.pendingBytes = 0;
      if (p.final) this.processes.delete(processId);
    }
  }
}
