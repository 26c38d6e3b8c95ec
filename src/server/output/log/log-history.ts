/**
 * The output log's history (output-log.ts): acknowledged output kept for `process/read`, up
 * to `retentionBytes` — none while the server's memory budget is past its pause mark (the
 * one thing held that may go), none once the client acknowledged the close — evicted oldest
 * first, events with the output before them. Acknowledged spilled chunks are never history:
 * they go, with everything before them. Pure.
 */
import { dropOutput, type LogEntry, type OutputMemory } from './log-entries.js';

export class LogHistory {
  /** Acknowledged output still kept. */
  bytes = 0;
  private limit: number;
  /** The server's memory budget is past its pause mark: no history is kept. */
  private squeezed = false;

  constructor(retentionBytes: number) {
    this.limit = retentionBytes;
  }

  /** No history is kept from now on (the client acknowledged the close). */
  keepNone(): void {
    this.limit = 0;
  }

  /** The memory budget is past its pause mark (or no longer): keep none until the pressure is over. */
  squeeze(squeezed: boolean): void {
    this.squeezed = squeezed;
  }

  /**
   * Lets go of the oldest acknowledged entries of `entries` (kept from `head`, acknowledged up
   * to `ackedSeq`, spilled up to `spilledThrough`) beyond the limit, their payloads given back
   * to `memory`: returns the new head, and the newest spilled seq let go of (0: none) with
   * the bytes of the spilled chunks let go of.
   */
  evict(entries: readonly LogEntry[], head: number, ackedSeq: number, spilledThrough: number, memory: OutputMemory | undefined): { head: number; freedSeq: number; freedBytes: number } {
    const limit = this.squeezed ? 0 : this.limit;
    const through = Math.min(ackedSeq, spilledThrough);
    let freedSeq = 0;
    let freedBytes = 0;
    while (head < entries.length) {
      const oldest = entries[head]!;
      if (oldest.seq > ackedSeq) break;
      const within = this.bytes <= limit && oldest.seq > through;
      if (oldest.kind === 'output') {
        if (within) break;
        this.bytes -= oldest.bytes;
        if (oldest.spilled) {
          freedBytes += oldest.bytes;
          freedSeq = oldest.seq;
        }
        dropOutput(oldest, memory); // free the payload now; the slot itself goes at the next compaction
      } else if (within) {
        break;
      }
      head++;
    }
    return { head, freedSeq, freedBytes };
  }
}
