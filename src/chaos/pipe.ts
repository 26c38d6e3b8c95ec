/**
 * One direction of a proxied connection, shaped like a bad link: every chunk read from the
 * source is delayed (latency ± jitter, order preserved as TCP preserves it), paced to a
 * bandwidth cap, held or dropped in a black hole, and cut off after a byte quota. Memory is
 * bounded: past `highWaterMark` queued bytes the source is paused, so a slow link slows
 * the sender instead of filling the proxy (as a TCP window would).
 */
import type net from 'node:net';
import { performance } from 'node:perf_hooks';

/** The link's shape for one direction, read on every chunk (so changes apply at once). */
export interface LinkShape {
  latencyMs: number;
  jitterMs: number;
  /** Bytes per second; 0 = unlimited. */
  bandwidth: number;
  /** 'hold': nothing is delivered (bytes wait, as TCP would retransmit them); 'drop': bytes vanish. */
  blackhole: false | 'hold' | 'drop';
}

export interface PipeCounters {
  /** Bytes written to the destination. */
  forwarded: number;
  /** Bytes read from the source and waiting (latency, bandwidth, black hole) to be written. */
  held: number;
  /** Bytes read and thrown away (a dropping black hole, or past a byte quota). */
  dropped: number;
}

export interface PipeOptions {
  shape: () => LinkShape;
  /**
   * How many of `length` bytes a byte quota lets through (all of them when there is none).
   * Whoever spends it decides what happens next (see `finish`).
   */
  quota: (length: number) => number;
  random: () => number;
  now?: () => number;
  highWaterMark?: number;
}

interface Pending {
  chunk: Buffer;
  /** When the chunk may be written (ms, on the `now` clock). */
  due: number;
  /** Called once the chunk has been handed to the kernel. */
  written?: () => void;
}

/** Pacing granularity: a capped link releases at most this much time's worth of bytes at once. */
const SLICE_MS = 10;
/**
 * A capped link that was idle may send this much time's worth at once (a token bucket's
 * burst, as tc's tbf has): without it every late timer would be time lost for good, and a
 * link shaped twice in a row (there and back) would fall well short of its rate.
 */
const BURST_MS = 20;
/**
 * Node's timers fire in whole milliseconds. A chunk due a fraction of a millisecond after the
 * one a timer fired for leaves with it when it is due within this much, instead of waiting
 * for the next tick (up to a whole millisecond late, more on a loaded machine): that lateness
 * hit every message that follows another closely (an answer, then the output it announced),
 * so `--latency` cost such exchanges more than it was asked to. Half a tick either way.
 */
const TICK_SLACK_MS = 0.5;

export class FaultPipe {
  readonly counters: PipeCounters = { forwarded: 0, held: 0, dropped: 0 };
  private queue: Pending[] = [];
  private timer: NodeJS.Timeout | undefined;
  /** When the capped link finishes sending what it already has (no credit for idle time). */
  private linkFreeAt = 0;
  /** The latest due time so far: nothing may overtake it. */
  private lastDue = 0;
  private finishing = false;
  private holding = false;
  private pressured = false;
  private disposed = false;
  private readonly now: () => number;
  private readonly highWaterMark: number;

  constructor(
    private readonly source: net.Socket,
    private readonly destination: net.Socket,
    private readonly options: PipeOptions,
  ) {
    this.now = options.now ?? (() => performance.now());
    this.highWaterMark = options.highWaterMark ?? 1024 * 1024;
    source.on('data', (chunk: Buffer) => this.push(chunk));
    destination.on('drain', () => this.relieve());
  }

  push(chunk: Buffer): void {
    if (this.disposed) return;
    const shape = this.options.shape();
    if (shape.blackhole === 'drop' || this.finishing) {
      this.counters.dropped += chunk.length;
      return;
    }
    const allowed = Math.min(chunk.length, this.options.quota(chunk.length));
    if (allowed < chunk.length) {
      this.counters.dropped += chunk.length - allowed;
      if (allowed === 0) return;
      chunk = chunk.subarray(0, allowed);
    }
    const now = this.now();
    const delay = Math.max(0, shape.latencyMs + (shape.jitterMs > 0 ? (2 * this.options.random() - 1) * shape.jitterMs : 0));
    if (shape.bandwidth > 0) {
      // Serialisation at the capped rate, then propagation: a slice arrives `delay` after the
      // link has finished sending it. Slices keep the pacing smooth for large chunks.
      // (Arrival before `now` just means at once.)
      const slice = Math.max(1, Math.floor((shape.bandwidth * SLICE_MS) / 1000));
      for (let offset = 0; offset < chunk.length; offset += slice) {
        const part = chunk.subarray(offset, offset + slice);
        this.linkFreeAt = Math.max(now - BURST_MS, this.linkFreeAt) + (part.length * 1000) / shape.bandwidth;
        this.enqueue(part, this.linkFreeAt + delay);
      }
    } else {
      this.enqueue(chunk, now + delay);
    }
  }

  /**
   * Stop taking bytes in (later ones are dropped) and resolve once everything already
   * queued has been handed to the kernel: a cut after a byte quota delivers the quota.
   */
  finish(): Promise<void> {
    this.finishing = true;
    return new Promise((resolve) => {
      if (this.disposed || this.destination.destroyed) return resolve();
      this.enqueue(Buffer.alloc(0), this.lastDue, resolve);
    });
  }

  /** Stop delivering (and reading) until released; queued bytes stay queued. */
  setHolding(holding: boolean): void {
    this.holding = holding;
    this.updateFlow();
    if (!holding) this.flush();
  }

  /** Forget everything queued (the connection is being cut): counted as held at the cut. */
  dispose(): void {
    this.disposed = true;
    clearTimeout(this.timer);
    this.timer = undefined;
    const waiting = this.queue.filter((p) => p.written);
    this.queue = [];
    for (const p of waiting) p.written!();
  }

  private enqueue(chunk: Buffer, due: number, written?: () => void): void {
    this.lastDue = Math.max(this.lastDue, due);
    this.queue.push({ chunk, due: this.lastDue, written });
    this.counters.held += chunk.length;
    this.updateFlow();
    this.flush();
  }

  private flush(): void {
    if (this.disposed || this.holding) return;
    const now = this.now();
    while (this.queue.length > 0 && this.queue[0]!.due <= now + TICK_SLACK_MS) {
      const { chunk, written } = this.queue.shift()!;
      this.counters.held -= chunk.length;
      if (this.destination.destroyed) {
        written?.();
        continue;
      }
      this.counters.forwarded += chunk.length;
      if (written) this.destination.write(chunk, () => written());
      else this.destination.write(chunk);
    }
    this.updateFlow();
    this.schedule(now);
  }

  private schedule(now: number): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.queue.length === 0 || this.holding || this.disposed) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.flush();
    }, Math.max(0, Math.ceil(this.queue[0]!.due - now)));
  }

  private relieve(): void {
    this.updateFlow();
  }

  /** Reads from the source only while neither a black hole nor a full queue stops them. */
  private updateFlow(): void {
    if (this.disposed) return;
    const full = this.counters.held >= this.highWaterMark || this.destination.writableNeedDrain;
    const drained = this.counters.held < this.highWaterMark / 2 && !this.destination.writableNeedDrain;
    if (full) this.pressured = true;
    else if (drained) this.pressured = false;
    if (this.holding || this.pressured) this.source.pause();
    else this.source.resume();
  }
}
