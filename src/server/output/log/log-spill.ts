/**
 * The output log's spill (output-log.ts): with a store (output-spill.ts, the state dir's disk),
 * the oldest unacknowledged chunks go there instead of pausing the child, in seq order, so
 * what is on disk is one run of seqs, (ackedSeq, spilledThrough], memory keeps at most the
 * window, and the child pauses only when the store refuses (its quota, a full disk). Spilled
 * chunks keep their seqs: sending and `process/read` read them back as if from memory, and
 * acknowledging them frees them (they are never history). Here: what is spilled (its bytes,
 * its newest seq, the last refusal), moving chunks to the store, reading and freeing them.
 */
import { dropOutput, indexAfter, sealOutput, type LogEntry, type OutputEntry, type OutputMemory } from './log-entries.js';
import type { OutputSpill, SpillRefusal } from './output-spill.js';

export class LogSpill {
  /** Bytes of the kept chunks whose bytes are in the store (all unacknowledged). */
  bytes = 0;
  /** The newest spilled seq (0: none yet). */
  through = 0;
  /** Why the store took nothing more, while memory is at the window because of it (null: it takes). */
  refusal: SpillRefusal | null = null;

  constructor(
    private readonly store: OutputSpill | undefined,
    private readonly windowBytes: number,
    private readonly memory: OutputMemory | undefined,
  ) {}

  /** Output past the window can go to a store (else the child pauses there, or keep-last drops). */
  get present(): boolean {
    return this.store !== undefined;
  }

  /** A restored log's entries (log-restore.ts): counts the chunks its predecessor spilled. */
  restored(entries: readonly LogEntry[]): void {
    for (const e of entries) {
      if (e.kind !== 'output' || !e.spilled) continue;
      this.bytes += e.bytes;
      this.through = e.seq;
    }
  }

  /**
   * While memory holds the window or more of unacknowledged output (`unackedBytes` in all,
   * this spill's part of it not in memory), moves the oldest chunk still in memory after
   * `ackedSeq` (of `entries`, kept from `head`) to the store, in seq order, and tells
   * `spilled` its seq. Stops at the first refusal (remembered until the store takes again),
   * and at an exit or close event: the store holds output only, and in kept mode what it holds
   * is dropped by the keeper, which must not forget an event (output after the exit, held past
   * the window, pauses as it always did).
   */
  spillExcess(entries: readonly LogEntry[], head: number, ackedSeq: number, unackedBytes: number, spilled: (seq: number) => void): void {
    const store = this.store;
    if (!store) return;
    this.refusal = null;
    let i = indexAfter(entries, head, Math.max(ackedSeq, this.through));
    while (unackedBytes - this.bytes >= this.windowBytes && i < entries.length) {
      const e = entries[i++]!;
      if (e.kind !== 'output') return;
      if (e.spilled) continue;
      sealOutput(e, this.memory);
      const refusal = store.append(e.seq, e.stream, e.data);
      if (refusal) {
        this.refusal = refusal;
        return;
      }
      dropOutput(e, this.memory);
      e.spilled = true;
      this.bytes += e.bytes;
      this.through = e.seq;
      spilled(e.seq);
    }
  }

  /** A spilled chunk's bytes, read back. */
  read(entry: OutputEntry): Buffer {
    return this.store!.read(entry.seq, entry.bytes);
  }

  /** Spilled chunks up to `seq`, `bytes` of them, are let go of (acknowledged, or dropped unread): the store frees them. */
  free(seq: number, bytes: number): void {
    this.bytes -= bytes;
    this.store?.freeThrough(seq);
  }

  /** `--keep-last`'s pending gaps changed: the store keeps them for a successor (output-spill.ts). */
  keptGaps(gaps: ReadonlyArray<{ first: number; last: number; bytes: number }>): void {
    this.store?.keptGaps?.(gaps);
  }

  /** The process is gone for good: the store lets go of everything. */
  discard(): void {
    this.store?.close();
    this.bytes = 0;
    this.refusal = null;
  }
}
