/**
 * The entries of a process's output log (output-log.ts) — output chunks, the exit, the
 * close — and what becomes of an output chunk's bytes: read in pieces, joined into one
 * Buffer once (`sealOutput`), let go of once (`dropOutput`), each piece given back to the
 * memory it lives in; and searching the entries kept (from `head` on), whose seqs ascend.
 * And the log's options, and the observer they may name (told what clients could see). Pure.
 */
import type { OutputStream } from '../../../protocol/index.js';
import type { OutputSpill } from './output-spill.js';

/** An entry as it is first exposed to a client. */
export type ExposedEntry =
  | { kind: 'output'; seq: number; stream: OutputStream; /** Its keeper stream's byte offset at the entry's end (exclusive). */ end: number }
  | { kind: 'exit'; seq: number }
  | { kind: 'close'; seq: number };

/**
 * Told by the log, synchronously; must not throw. `exposed`: once per entry, in seq order, the
 * moment it first becomes visible to a client (sent, returned by a read, skipped over or
 * acknowledged), before the caller can send or return it. `dropped`: the log let go of every
 * entry up to `seq` (evicted, or discarded).
 */
export interface OutputLogObserver {
  exposed(entry: ExposedEntry): void;
  dropped(seq: number): void;
}

export interface OutputLogOptions {
  /** Unacknowledged output at which the child stops being read. */
  windowBytes: number;
  /** Acknowledged output kept for `process/read`. */
  retentionBytes: number;
  /** Largest chunk built by appending (a larger piece is kept whole: the process splits its reads to this size). */
  maxChunkBytes: number;
  /**
   * Acknowledgement comes from the client (`acks`), or — in the Codex dialect — from the
   * kernel taking a frame (`written`) and from `process/read` answers.
   */
  clientAcks: boolean;
  /**
   * Where appended Buffers live (util/byte-arena.ts): told when the log lets go of one (evicted,
   * discarded, or joined into a copy), and asked to merge a chunk with the next read when
   * both are adjacent in memory. Without it the log only drops its references.
   */
  memory?: OutputMemory;
  /** Told when each entry is first exposed to a client, and when entries are let go of (log-restore.ts). */
  observer?: OutputLogObserver;
  /**
   * Where output past the window goes instead of pausing the child (output-spill.ts): the
   * oldest unacknowledged chunks, so memory keeps at most the window. Without it the child
   * pauses at the window, as it always did.
   */
  spill?: OutputSpill;
  /**
   * `--keep-last` (extension `keepLast`): at this many unacknowledged bytes, or when the
   * window is full and nothing more can be spilled (the spill's quota, a full disk, or no
   * spill), the oldest unacknowledged output chunks are dropped instead of pausing the child,
   * and each dropped run of seqs is reported as an `OutputGap`. Undefined: nothing is ever dropped.
   */
  keepLastBytes?: number;
}

/** Seqs `first`..`last` (inclusive, all output) were dropped unread (`--keep-last`): `bytes` of output. */
export interface OutputGap {
  first: number;
  last: number;
  bytes: number;
}

export interface OutputEntry {
  readonly kind: 'output';
  readonly seq: number;
  readonly stream: OutputStream;
  bytes: number;
  /** The bytes; while the chunk is still open for appending, the pieces so far. */
  data: Buffer;
  parts: Buffer[] | null;
  /** Its bytes are in the log's spill (output-spill.ts), not in `data` (which is empty). */
  spilled?: true;
}

export interface ExitEntry {
  readonly kind: 'exit';
  readonly seq: number;
  readonly exitCode: number;
}

export interface CloseEntry {
  readonly kind: 'close';
  readonly seq: number;
}

export type LogEntry = OutputEntry | ExitEntry | CloseEntry;

/** What the log needs of the memory its Buffers live in (see OutputArena). */
export interface OutputMemory {
  extend(first: Buffer, second: Buffer): Buffer | null;
  release(view: Buffer): void;
}

const EMPTY = Buffer.alloc(0);

/** An output chunk's bytes, in the pieces it was read in (one piece once joined). */
export function outputParts(entry: OutputEntry): readonly Buffer[] {
  return entry.parts ?? [entry.data];
}

/** Joins a chunk's pieces into one Buffer (a copy: the pieces are let go of). */
export function sealOutput(entry: OutputEntry, memory: OutputMemory | undefined): void {
  const parts = entry.parts;
  if (!parts) return;
  entry.data = Buffer.concat(parts, entry.bytes);
  entry.parts = null;
  if (memory) for (const part of parts) memory.release(part);
}

/** Lets go of a chunk's bytes (exactly once: it is empty afterwards). */
export function dropOutput(entry: OutputEntry, memory: OutputMemory | undefined): void {
  if (memory) for (const part of entry.parts ?? [entry.data]) memory.release(part);
  entry.data = EMPTY;
  entry.parts = null;
}

/** Index of the first entry from `head` on with seq > `seq` (seqs ascend; binary search). */
export function indexAfter(entries: readonly LogEntry[], head: number, seq: number): number {
  let lo = head;
  let hi = entries.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (entries[mid]!.seq <= seq) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Output bytes of the entries from `head` on with from < seq <= to. */
export function outputBytesBetween(entries: readonly LogEntry[], head: number, from: number, to: number): number {
  let bytes = 0;
  for (let i = indexAfter(entries, head, from); i < entries.length; i++) {
    const e = entries[i]!;
    if (e.seq > to) break;
    if (e.kind === 'output') bytes += e.bytes;
  }
  return bytes;
}

/** Whether an output chunk with seq > `seq` is kept (from `head` on). */
export function hasOutputAfter(entries: readonly LogEntry[], head: number, seq: number): boolean {
  for (let i = indexAfter(entries, head, seq); i < entries.length; i++) if (entries[i]!.kind === 'output') return true;
  return false;
}
