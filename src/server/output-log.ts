/**
 * One process's output log: numbers its events (one sequence shared by output, exit and
 * close), keeps its recent output for `process/read`, tracks what a client may not have
 * received yet, evicts only what is safe to evict, and decides whether the child's pipes
 * may be read. Pure bookkeeping — no sockets, no timers, no child — so it is tested on its
 * own (test/server-output-log.test.ts), like the client's sequencer.
 */
import type { OutputStream } from '../protocol/index.js';

/**
 * unsent: no connection took it (detached, or its socket died before writing it) — never
 * evicted, and a retention full of these pauses the child; inflight: queued on a socket —
 * not evicted either (the socket may still die), bounded by the backpressure marks;
 * delivered: written to the kernel or read back by `process/read` — evictable.
 */
export const enum ChunkState {
  Unsent,
  Inflight,
  Delivered,
}

export interface LoggedChunk {
  readonly seq: number;
  readonly stream: OutputStream;
  /** base64, encoded once on arrival and reused by the notification and every read */
  chunk: string;
  readonly bytes: number;
  state: ChunkState;
}

export interface ReadChunk {
  seq: number;
  stream: OutputStream;
  chunk: string;
}

/** What the pause decision looks at (see `shouldPauseReading`). */
export interface FlowInputs {
  /** The process closed or is being removed: its pipes must drain to end of file. */
  finished: boolean;
  /** The attached connection's send buffer is above its high-water mark. */
  backpressured: boolean;
  unsentBytes: number;
  retainedBytes: number;
  retentionBytes: number;
}

/**
 * Whether to stop reading a child's output. Reading pauses while the connection is backed
 * up, or while retention is full of output nobody has received yet (detached, or just
 * resumed and not read back): the child then blocks on write instead of its output being
 * dropped. A finished process is always read, so it reaches end of file.
 */
export function shouldPauseReading(f: FlowInputs): boolean {
  if (f.finished) return false;
  return f.backpressured || (f.unsentBytes > 0 && f.retainedBytes >= f.retentionBytes);
}

export class OutputLog {
  private nextSeq = 1;
  private chunks: LoggedChunk[] = [];
  /** Index of the oldest retained chunk (evicted slots before it are compacted lazily). */
  private head = 0;
  private _retainedBytes = 0;
  private _totalBytes = 0;
  private _unsentBytes = 0;

  constructor(readonly retentionBytes: number) {}

  /** The next sequence number (what `process/read` reports as `nextSeq` when not limited). */
  get next(): number {
    return this.nextSeq;
  }

  /** Takes a sequence number for an event that is not output (exit, close). */
  takeSeq(): number {
    return this.nextSeq++;
  }

  /** Records a chunk of output, in flight until `unsent`/`written` says otherwise. */
  append(stream: OutputStream, data: Buffer): LoggedChunk {
    this._totalBytes += data.length;
    const chunk: LoggedChunk = { seq: this.nextSeq++, stream, chunk: data.toString('base64'), bytes: data.length, state: ChunkState.Inflight };
    this.chunks.push(chunk);
    this._retainedBytes += chunk.bytes;
    this.trim();
    return chunk;
  }

  /** No connection took the chunk. */
  unsent(chunk: LoggedChunk): void {
    if (chunk.state === ChunkState.Unsent) return;
    chunk.state = ChunkState.Unsent;
    this._unsentBytes += chunk.bytes;
  }

  /** The socket reported the chunk written to the kernel (ok) or died with it queued. */
  written(chunk: LoggedChunk, ok: boolean): void {
    if (chunk.state !== ChunkState.Inflight) return; // already read back
    if (ok) {
      chunk.state = ChunkState.Delivered;
      this.trim();
    } else {
      // The client never got it; keep it for the replay.
      this.unsent(chunk);
    }
  }

  /** The client holds everything up to `uptoSeq` (it read it back): it may be evicted. */
  acknowledge(uptoSeq: number): void {
    for (let i = this.head; i < this.chunks.length; i++) {
      const c = this.chunks[i]!;
      if (c.seq > uptoSeq) break;
      if (c.state === ChunkState.Unsent) this._unsentBytes -= c.bytes;
      c.state = ChunkState.Delivered;
    }
    this.trim();
  }

  /**
   * Retained chunks with seq > afterSeq, in order, never split; with `maxBytes`, stops before
   * the chunk that would exceed it (but returns at least one). Reading acknowledges what it
   * returns (see `acknowledge`).
   */
  read(afterSeq: number, maxBytes: number | null): { chunks: ReadChunk[]; nextSeq: number } {
    const chunks = this.chunks;
    // First retained chunk with seq > afterSeq (seqs ascend; binary search).
    let lo = this.head;
    let hi = chunks.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (chunks[mid]!.seq <= afterSeq) lo = mid + 1;
      else hi = mid;
    }
    const out: ReadChunk[] = [];
    let bytes = 0;
    for (let i = lo; i < chunks.length; i++) {
      const c = chunks[i]!;
      if (maxBytes !== null && out.length > 0 && bytes + c.bytes > maxBytes) break;
      out.push({ seq: c.seq, stream: c.stream, chunk: c.chunk });
      bytes += c.bytes;
      if (maxBytes !== null && bytes >= maxBytes) break;
    }
    const lastReturned = out.length ? out[out.length - 1]!.seq : afterSeq;
    this.acknowledge(Math.max(afterSeq, lastReturned));
    const nextSeq = maxBytes !== null && out.length > 0 ? lastReturned + 1 : this.nextSeq;
    return { chunks: out, nextSeq };
  }

  /** Seq of the newest retained chunk (0 if none). */
  get lastChunkSeq(): number {
    return this.chunks.length > this.head ? this.chunks[this.chunks.length - 1]!.seq : 0;
  }

  /** Bytes of output recorded so far. */
  get totalBytes(): number {
    return this._totalBytes;
  }

  /** Bytes kept for replay. */
  get retainedBytes(): number {
    return this._retainedBytes;
  }

  /** Bytes no connection has taken. */
  get unsentBytes(): number {
    return this._unsentBytes;
  }

  /** Evicts the oldest output beyond retention, but never output a client may not have received. */
  private trim(): void {
    const chunks = this.chunks;
    while (this._retainedBytes > this.retentionBytes && this.head < chunks.length) {
      const oldest = chunks[this.head]!;
      if (oldest.state !== ChunkState.Delivered) break;
      this._retainedBytes -= oldest.bytes;
      oldest.chunk = ''; // free the payload now; the slot itself goes at the next compaction
      this.head++;
    }
    if (this.head > 1024 && this.head * 2 > chunks.length) {
      this.chunks = chunks.slice(this.head);
      this.head = 0;
    }
  }
}
