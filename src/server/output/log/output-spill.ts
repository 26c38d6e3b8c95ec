/**
 * Where a process's output goes past its in-memory window (output beyond the window goes to
 * disk, not into a pause): what the output log (output-log.ts) needs of a store, and nothing
 * of files, directories or quotas. The file store lives with the state dir (restart/spill-files.ts)
 * and is injected by the server; a test injects one in memory.
 *
 * The log spills its oldest unacknowledged chunks first, in seq order, so what is on disk is
 * always one run of seqs right after the acknowledged point: (ackedSeq, spilledThrough].
 */
import type { OutputStream } from '../../../protocol/index.js';

/** Why a store took nothing more: its quota (per session, per token, server-wide), or a full filesystem. */
export type SpillRefusal = 'output-disk-quota' | 'output-disk-full';

export interface OutputSpill {
  /**
   * Stores chunk `seq` (seqs ascend across calls); null once it is stored, else why it was
   * not (nothing of it is stored then, and the log keeps it in memory).
   */
  append(seq: number, stream: OutputStream, data: Buffer): SpillRefusal | null;
  /** The bytes of a stored chunk (`bytes` long). */
  read(seq: number, bytes: number): Buffer;
  /** Every chunk up to `seq` is acknowledged: the store may let go of it. */
  freeThrough(seq: number): void;
  /** Bytes stored and not freed. */
  readonly bytes: number;
  /** The process is gone for good: everything goes. */
  close(): void;
  /**
   * `--keep-last`: the runs of seqs dropped unread that the client has not acknowledged past
   * (oldest first), told before the drop reaches a kept keeper, so that a successor server
   * (restart adoption) tells the same gaps. A store that keeps nothing for a successor has none.
   */
  keptGaps?(gaps: ReadonlyArray<{ first: number; last: number; bytes: number }>): void;
}
