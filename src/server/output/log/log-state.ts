/**
 * Where an output log (output-log.ts) stands: the entries it keeps, its three cursors over
 * the sequence and the bytes of each region, with the read-only views the process, its flow
 * and the tests read. The log's operations move them; nothing here changes them.
 *
 * Three cursors over the sequence, always ackedSeq <= sentSeq < next:
 *
 *     history (acked, evictable)  | in flight (sent, unacked) | unsent
 *   ------------------------------+---------------------------+------------->
 *                          ackedSeq                      sentSeq
 *
 * - acknowledged: with the `acks` extension, what the client says it consumed; in the Codex
 *   dialect, what the kernel took on a live socket or what `process/read` returned. Only
 *   acknowledged output is ever evicted, oldest first, beyond `retentionBytes`.
 * - sent: handed to the current connection. When a connection goes away, everything
 *   after the acknowledged point is unsent again (`rewind`) and is sent again in order.
 * - unacknowledged output (in flight + unsent) is bounded by `windowBytes`: at the window the
 *   child is no longer read (`shouldReadChild`), so it blocks on write — unless the oldest
 *   unacknowledged chunks can go to a spill on disk (log-spill.ts), or, with `--keep-last`,
 *   are dropped into gaps the client is told of (log-gaps.ts).
 */
import type { LogEntry, OutputLogOptions } from './log-entries.js';
import { LogHistory } from './log-history.js';
import { LogSpill } from './log-spill.js';
import type { SpillRefusal } from './output-spill.js';

export abstract class LogState {
  protected nextSeq = 1;
  protected entries: LogEntry[] = [];
  /** Index of the oldest entry still kept (evicted slots before it are compacted lazily). */
  protected head = 0;
  protected _ackedSeq = 0;
  protected _sentSeq = 0;
  protected _unackedBytes = 0;
  protected _unsentBytes = 0;
  protected _totalBytes = 0;
  protected _exitSeq: number | null = null;
  protected _closeSeq: number | null = null;
  /** The unacknowledged chunks moved to disk past the window (log-spill.ts). */
  protected readonly spill: LogSpill;
  /** The acknowledged output kept for `process/read` (log-history.ts). */
  protected readonly history: LogHistory;

  constructor(readonly options: OutputLogOptions) {
    this.spill = new LogSpill(options.spill, options.windowBytes, options.memory);
    this.history = new LogHistory(options.retentionBytes);
  }

  /** The entries kept right now, oldest first (diagnostics and tests; do not modify). */
  kept(): readonly LogEntry[] {
    return this.entries.slice(this.head);
  }

  get next(): number {
    return this.nextSeq;
  }

  get ackedSeq(): number {
    return this._ackedSeq;
  }

  get sentSeq(): number {
    return this._sentSeq;
  }

  get exitSeq(): number | null {
    return this._exitSeq;
  }

  get closeSeq(): number | null {
    return this._closeSeq;
  }

  /** Seq of the newest output chunk (0 if none). */
  get lastOutputSeq(): number {
    for (let i = this.entries.length - 1; i >= this.head; i--) {
      const e = this.entries[i]!;
      if (e.kind === 'output') return e.seq;
    }
    return 0;
  }

  /** The client acknowledged the close: nothing of this process is needed any more. */
  get fullyAcknowledged(): boolean {
    return this._closeSeq !== null && this._ackedSeq >= this._closeSeq;
  }

  /** Output bytes recorded so far. */
  get totalBytes(): number {
    return this._totalBytes;
  }

  /** Output not acknowledged yet (in flight and unsent): bounded by the window. */
  get unackedBytes(): number {
    return this._unackedBytes;
  }

  /** Output not sent on the current connection yet. */
  get unsentBytes(): number {
    return this._unsentBytes;
  }

  /** Acknowledged output still kept for `process/read`. */
  get historyBytes(): number {
    return this.history.bytes;
  }

  /** Everything this log keeps in memory (not what it spilled). */
  get retainedBytes(): number {
    return this.history.bytes + this.memoryUnackedBytes;
  }

  /** Unacknowledged output in memory: what the window bounds (the rest is spilled). */
  get memoryUnackedBytes(): number {
    return this._unackedBytes - this.spill.bytes;
  }

  /** Unacknowledged output in the spill. */
  get spilledBytes(): number {
    return this.spill.bytes;
  }

  /** The newest seq ever spilled (0: none). */
  get spilledThrough(): number {
    return this.spill.through;
  }

  /** Why memory is at the window although the log has a spill: the spill refused (its quota, a full disk); else null. */
  get spillRefusal(): SpillRefusal | null {
    return this.spill.refusal;
  }
}
