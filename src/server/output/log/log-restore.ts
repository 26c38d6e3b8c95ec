/**
 * What the output log (output-log.ts) tells a keeper that keeps its output (restart adoption;
 * its observer, log-entries.ts), and how a successor server rebuilds the log from what that
 * keeper kept. Pure.
 *
 * The keeper numbers each stream's bytes from 0 for the life of the process (stream 1:
 * stdout, or the terminal; stream 2: stderr). When an entry is first exposed to a client the
 * log tells its observer the entry's seq and, for output, the END offset of its stream as of
 * the end of the entry (the server sends that to the keeper as `mark`); when it lets go of
 * entries it says up to which seq (`drop`). From the marks the keeper still holds and the
 * bytes it retains, `restorePlan` rebuilds the same entries with the same seqs, so the
 * successor's sequence numbers match what clients already saw.
 */
import type { OutputStream } from '../../../protocol/index.js';
import type { LogEntry } from './log-entries.js';

/** The keeper's stream number of an output stream (a terminal's output is stream 1). */
export function keeperStream(stream: OutputStream): 1 | 2 {
  return stream === 'stderr' ? 2 : 1;
}

/** Per keeper stream: bytes recorded, and bytes covered by exposed entries. */
export class StreamOffsets {
  readonly total: Record<1 | 2, number> = { 1: 0, 2: 0 };
  readonly exposed: Record<1 | 2, number> = { 1: 0, 2: 0 };

  appended(stream: OutputStream, bytes: number): void {
    this.total[keeperStream(stream)] += bytes;
  }

  /** The next entry of `stream` (`bytes` long) is exposed: returns its END offset. */
  expose(stream: OutputStream, bytes: number): number {
    return (this.exposed[keeperStream(stream)] += bytes);
  }

  /** Everything recorded counts as passed (entries discarded without being exposed). */
  passAll(): void {
    this.exposed[1] = this.total[1];
    this.exposed[2] = this.total[2];
  }
}

/** A mark as the keeper dump gives it (backend/child.ts KeptDump). */
export interface RestoreMark {
  seq: number;
  stream: 1 | 2 | 'x' | 'c';
  end?: number;
}

/** What a successor knows of a kept process's output (backend/child.ts KeptDump, and more). */
export interface RestoreState {
  /** The bytes the keeper retains: [base, base + data.length) of each stream. */
  streams: { 1: { base: number; data: Buffer }; 2: { base: number; data: Buffer } };
  /** The marks it holds (not dropped), in increasing seq. */
  marks: readonly RestoreMark[];
  /** Stream 1 is a terminal ('pty') rather than 'stdout'. */
  tty: boolean;
  /** The exit code for an `x` mark (required when there is one). */
  exitCode?: number | null;
  /** The highest seq dropped, when known: seqs continue after it even when no mark is left. */
  droppedSeq?: number;
  /**
   * The chunks its predecessor spilled (output/log/output-spill.ts) and then told the keeper to
   * drop, oldest first, all at or below `droppedSeq`: they come back as spilled entries, their
   * bytes read from the spill when sent.
   */
  spilled?: ReadonlyArray<{ seq: number; stream: OutputStream; bytes: number }>;
  /**
   * `--keep-last`: the runs of seqs its predecessor dropped unread and had not seen
   * acknowledged past (oldest first, each at or below the keeper's exposed seq): they are told
   * again as they were, and whatever the keeper or the spill still holds of them is gone.
   */
  gaps?: ReadonlyArray<{ first: number; last: number; bytes: number }>;
}

/** The log rebuilt: its entries (exposed, none acknowledged) and the bytes after them. */
export interface RestorePlan {
  entries: LogEntry[];
  /** Seq of the last exposed entry (the highest mark), or droppedSeq. */
  exposedSeq: number;
  /** Entries up to this seq are gone (acknowledged and dropped before the restart). */
  ackedSeq: number;
  exitSeq: number | null;
  closeSeq: number | null;
  offsets: StreamOffsets;
  /** Output retained past the last mark of its stream: new, unexposed entries. */
  leftovers: Array<{ stream: OutputStream; data: Buffer }>;
}

/** Rebuilds a log's entries from a kept process's marks and bytes; throws if they do not fit together. */
export function restorePlan(state: RestoreState): RestorePlan {
  const names: Record<1 | 2, OutputStream> = { 1: state.tty ? 'pty' : 'stdout', 2: 'stderr' };
  const offsets = new StreamOffsets();
  const cursor: Record<1 | 2, number> = { 1: state.streams[1].base, 2: state.streams[2].base };
  const entries: LogEntry[] = [];
  let exitSeq: number | null = null;
  let closeSeq: number | null = null;
  let last = state.droppedSeq ?? 0;
  let previous = 0;
  for (const s of state.spilled ?? []) {
    if (!Number.isSafeInteger(s.seq) || s.seq <= previous || s.seq > last) throw new Error(`restore: spilled chunk ${s.seq} out of order (after ${previous}, dropped through ${last})`);
    previous = s.seq;
    entries.push({ kind: 'output', seq: s.seq, stream: s.stream, bytes: s.bytes, data: Buffer.alloc(0), parts: null, spilled: true });
  }
  for (const mark of state.marks) {
    if (!Number.isSafeInteger(mark.seq) || mark.seq <= last) throw new Error(`restore: mark ${mark.seq} out of order (after ${last})`);
    last = mark.seq;
    if (mark.stream === 'x') {
      if (state.exitCode === undefined || state.exitCode === null) throw new Error(`restore: exit mark ${mark.seq} without an exit code`);
      entries.push({ kind: 'exit', seq: mark.seq, exitCode: state.exitCode });
      exitSeq = mark.seq;
      continue;
    }
    if (mark.stream === 'c') {
      entries.push({ kind: 'close', seq: mark.seq });
      closeSeq = mark.seq;
      continue;
    }
    const s = mark.stream;
    const { base, data } = state.streams[s];
    const end = mark.end ?? NaN;
    if (!(end >= cursor[s] && end <= base + data.length)) {
      throw new Error(`restore: mark ${mark.seq} ends stream ${s} at ${end}, outside the retained ${cursor[s]}..${base + data.length}`);
    }
    const bytes = data.subarray(cursor[s] - base, end - base);
    cursor[s] = end;
    entries.push({ kind: 'output', seq: mark.seq, stream: names[s], bytes: bytes.length, data: bytes, parts: null });
  }
  const leftovers: RestorePlan['leftovers'] = [];
  for (const s of [1, 2] as const) {
    const { base, data } = state.streams[s];
    // Leftovers are appended to the rebuilt log, which counts them into `total`.
    offsets.exposed[s] = offsets.total[s] = cursor[s];
    if (cursor[s] < base + data.length) leftovers.push({ stream: names[s], data: data.subarray(cursor[s] - base) });
  }
  const firstSeq = entries.length > 0 ? entries[0]!.seq : last + 1;
  return { entries, exposedSeq: last, ackedSeq: firstSeq - 1, exitSeq, closeSeq, offsets, leftovers };
}
