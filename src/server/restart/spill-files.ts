/**
 * The output spill on disk (output beyond the window goes to disk): one directory per process
 * under the state dir's spill/ directory, holding segment files of 16 MiB (`SPILL_SEGMENT_BYTES`),
 * each a run of records `seq (f64 LE) | stream (u8) | 3 zero bytes | length (u32 LE) | bytes`,
 * appended in seq order. The output log (output/log/output-log.ts) sees only `OutputSpill`.
 *
 * - Written by the server with one write per chunk (the page cache: a server killed with
 *   kill -9 loses nothing written; the keeper is told to drop a chunk only once it is).
 * - Freed by segment rotation, not hole punching: a segment goes (unlink) once every record in
 *   it is acknowledged, so at most one segment of acknowledged bytes stays on disk; Node has no
 *   FALLOC_FL_PUNCH_HOLE, and an unlink is one portable syscall.
 * - Disk is taken from the quota (disk-quota.ts) as written and given back as segments go; a
 *   full filesystem (ENOSPC, EDQUOT) or any write error refuses the chunk ("output-disk-full")
 *   after cutting the segment back, so nothing half-written is ever read.
 * - A successor server reopens the directory (`SpillFiles.reopen`) and gets its records back.
 * - `--keep-last`'s pending gaps (runs of seqs dropped unread) are kept in the file `gaps`
 *   beside the segments: `count (u32 LE) | 4 zero bytes`, then per gap `first | last | bytes`
 *   (f64 LE each), rewritten in place with one write as they change (before the chunk dropped
 *   leaves the segments or the keeper), so a successor tells the gaps its predecessor told.
 * - Descriptors: the segment being written, the one last read and the gaps file (three at most).
 */
import { closeSync, constants as fsConstants, ftruncateSync, mkdirSync, openSync, readdirSync, readSync, rmSync, statSync, unlinkSync, writeSync, writevSync } from 'node:fs';
import { join } from 'node:path';
import type { OutputStream } from '../../protocol/index.js';
import type { OutputSpill, SpillRefusal } from '../output/index.js';
import { SPILL_SEGMENT_BYTES, type DiskAccount } from './disk-quota.js';

const HEADER = 16;
const STREAM_CODE: Record<OutputStream, number> = { stdout: 1, stderr: 2, pty: 3 };
const STREAM_NAME: Record<number, OutputStream> = { 1: 'stdout', 2: 'stderr', 3: 'pty' };

/** The gaps file: its name in the directory, its header, one gap's size, and the most gaps it keeps (the newest). */
const GAPS_FILE = 'gaps';
const GAPS_HEADER = 8;
const GAP_BYTES = 24;
export const MAX_KEPT_GAPS = 4096;

/** A `--keep-last` gap kept on disk: seqs `first`..`last` dropped unread, `bytes` of output. */
export interface KeptGap {
  first: number;
  last: number;
  bytes: number;
}

/** A record kept on disk (what a successor rebuilds the log's spilled entries from). */
export interface SpilledRecord {
  seq: number;
  stream: OutputStream;
  bytes: number;
}

interface Segment {
  readonly name: string;
  readonly firstSeq: number;
  lastSeq: number;
  size: number;
}

export class SpillFiles implements OutputSpill {
  private readonly segments: Segment[] = [];
  /** Per record kept, in seq order: its segment and offset (from `head` on). */
  private readonly index: Array<{ seq: number; stream: OutputStream; bytes: number; segment: Segment; offset: number }> = [];
  private head = 0;
  private writeFd: number | null = null;
  private readCache: { segment: Segment; fd: number } | null = null;
  private stored = 0;
  private gapsFd: number | null = null;
  /** Bytes of the gaps file as last written (a shorter list cuts it back). */
  private gapsSize = 0;
  /** The gaps a predecessor left (reopen), oldest first. */
  private keptAtOpen: KeptGap[] = [];

  private constructor(
    readonly dir: string,
    private readonly account: DiskAccount,
    private readonly segmentBytes: number,
  ) {}

  /** A new, empty spill in `dir` (created; anything there from before is removed). */
  static create(dir: string, account: DiskAccount, segmentBytes = SPILL_SEGMENT_BYTES): SpillFiles {
    rmSync(dir, { recursive: true, force: true });
    return new SpillFiles(dir, account, segmentBytes);
  }

  /**
   * The spill a predecessor left in `dir` (restart adoption), its records up to `keepThrough`
   * read back (the keeper was told to drop those; later ones it still holds itself, so they are
   * cut off here, as is a record cut short by a predecessor that died mid-write). Empty if none.
   */
  static reopen(dir: string, account: DiskAccount, keepThrough: number, segmentBytes = SPILL_SEGMENT_BYTES): SpillFiles {
    const spill = new SpillFiles(dir, account, segmentBytes);
    let names: string[] = [];
    try {
      names = readdirSync(dir).filter((n) => n.endsWith('.seg'));
    } catch {
      return spill;
    }
    names.sort();
    const header = Buffer.alloc(HEADER);
    for (const name of names) {
      const path = join(dir, name);
      const fd = openSync(path, 'r+');
      try {
        const size = statSync(path).size;
        const segment: Segment = { name, firstSeq: 0, lastSeq: 0, size: 0 };
        let at = 0;
        while (at + HEADER <= size) {
          if (readSync(fd, header, 0, HEADER, at) !== HEADER) break;
          const seq = header.readDoubleLE(0);
          const stream = STREAM_NAME[header[8]!];
          const bytes = header.readUInt32LE(12);
          if (!stream || !Number.isSafeInteger(seq) || seq > keepThrough || at + HEADER + bytes > size) break;
          const last = spill.index.length > 0 ? spill.index[spill.index.length - 1]!.seq : 0;
          if (seq <= last) break;
          if (segment.size === 0) (segment as { firstSeq: number }).firstSeq = seq;
          segment.lastSeq = seq;
          spill.index.push({ seq, stream, bytes, segment, offset: at });
          spill.stored += bytes;
          at += HEADER + bytes;
          segment.size = at;
        }
        if (at < size) ftruncateSync(fd, at);
        if (segment.size === 0) {
          unlinkSync(path);
          continue;
        }
        account.take(segment.size); // what is on disk counts, whatever the quota says now
        spill.segments.push(segment);
      } finally {
        closeSync(fd);
      }
    }
    spill.keptAtOpen = readGaps(join(dir, GAPS_FILE));
    return spill;
  }

  /** The `--keep-last` gaps its predecessor kept (reopen), oldest first; none for a new spill. */
  gaps(): KeptGap[] {
    return this.keptAtOpen.map((g) => ({ ...g }));
  }

  /**
   * `--keep-last`: the pending gaps (oldest first; the newest MAX_KEPT_GAPS), written over the
   * last list with one write. Best effort: a failure leaves the last list (a successor then
   * tells less), never stops the log.
   */
  keptGaps(gaps: ReadonlyArray<KeptGap>): void {
    const list = gaps.length > MAX_KEPT_GAPS ? gaps.slice(gaps.length - MAX_KEPT_GAPS) : gaps;
    const buffer = Buffer.alloc(GAPS_HEADER + list.length * GAP_BYTES);
    buffer.writeUInt32LE(list.length, 0);
    list.forEach((g, i) => {
      const at = GAPS_HEADER + i * GAP_BYTES;
      buffer.writeDoubleLE(g.first, at);
      buffer.writeDoubleLE(g.last, at + 8);
      buffer.writeDoubleLE(g.bytes, at + 16);
    });
    try {
      if (this.gapsFd === null) {
        mkdirSync(this.dir, { recursive: true, mode: 0o700 });
        this.gapsFd = openSync(join(this.dir, GAPS_FILE), fsConstants.O_RDWR | fsConstants.O_CREAT | fsConstants.O_NOFOLLOW, 0o600);
        this.gapsSize = statSync(join(this.dir, GAPS_FILE)).size;
      }
      // One write: a server killed around it leaves the old list or the new one, and the
      // count in the header says where the list ends (a longer old one is cut back after).
      writeSync(this.gapsFd, buffer, 0, buffer.length, 0);
      if (buffer.length < this.gapsSize) ftruncateSync(this.gapsFd, buffer.length);
      this.gapsSize = buffer.length;
    } catch {
      // The disk is full or the directory is gone: the last list stays.
    }
  }

  /** The records kept, oldest first. */
  records(): SpilledRecord[] {
    return this.index.slice(this.head).map(({ seq, stream, bytes }) => ({ seq, stream, bytes }));
  }

  append(seq: number, stream: OutputStream, data: Buffer): SpillRefusal | null {
    const size = HEADER + data.length;
    const refusal = this.account.take(size);
    if (refusal) return refusal;
    let segment = this.segments[this.segments.length - 1];
    try {
      if (!segment || this.writeFd === null || segment.size + size > this.segmentBytes) {
        this.closeWrite();
        mkdirSync(this.dir, { recursive: true, mode: 0o700 });
        const name = `${seq.toString(16).padStart(14, '0')}.seg`;
        this.writeFd = openSync(join(this.dir, name), 'a', 0o600);
        segment = { name, firstSeq: seq, lastSeq: seq, size: 0 };
        this.segments.push(segment);
      }
    } catch {
      this.account.give(size);
      return 'output-disk-full';
    }
    const header = Buffer.alloc(HEADER);
    header.writeDoubleLE(seq, 0);
    header[8] = STREAM_CODE[stream];
    header.writeUInt32LE(data.length, 12);
    let written = 0;
    try {
      while (written < size) {
        const parts = written < HEADER ? [header.subarray(written), data] : [data.subarray(written - HEADER)];
        written += writevSync(this.writeFd!, parts);
      }
    } catch {
      // ENOSPC, EDQUOT or an I/O error: nothing of this record stays (a reader never meets half of one).
      try {
        if (written > 0) ftruncateSync(this.writeFd!, segment.size);
      } catch {
        this.closeWrite(); // cannot cut it back: write no more into that segment
      }
      this.account.give(size);
      return 'output-disk-full';
    }
    this.index.push({ seq, stream, bytes: data.length, segment, offset: segment.size });
    segment.lastSeq = seq;
    segment.size += size;
    this.stored += data.length;
    return null;
  }

  read(seq: number, bytes: number): Buffer {
    const at = this.find(seq);
    const record = at === -1 ? undefined : this.index[at];
    if (!record || record.bytes !== bytes) throw new Error(`output spill: no chunk ${seq} of ${bytes} bytes in ${this.dir}`);
    if (this.readCache?.segment !== record.segment) {
      if (this.readCache) closeSync(this.readCache.fd);
      this.readCache = null;
      this.readCache = { segment: record.segment, fd: openSync(join(this.dir, record.segment.name), 'r') };
    }
    const out = Buffer.allocUnsafe(bytes);
    let got = 0;
    while (got < bytes) {
      const n = readSync(this.readCache.fd, out, got, bytes - got, record.offset + HEADER + got);
      if (n === 0) throw new Error(`output spill: chunk ${seq} cut short in ${this.dir}`);
      got += n;
    }
    return out;
  }

  freeThrough(seq: number): void {
    while (this.head < this.index.length && this.index[this.head]!.seq <= seq) this.stored -= this.index[this.head++]!.bytes;
    if (this.head > 1024 && this.head * 2 > this.index.length) {
      this.index.splice(0, this.head);
      this.head = 0;
    }
    // Whole segments whose every record is freed go; the one being written stays until it is passed.
    while (this.segments.length > 0 && this.segments[0]!.lastSeq <= seq) {
      const segment = this.segments[0]!;
      if (this.segments.length === 1 && this.writeFd !== null) {
        // The segment being written: start a new one at the next append.
        this.closeWrite();
      }
      if (this.readCache?.segment === segment) {
        closeSync(this.readCache.fd);
        this.readCache = null;
      }
      this.segments.shift();
      try {
        unlinkSync(join(this.dir, segment.name));
      } catch {
        // already gone: nothing to free on disk
      }
      this.account.give(segment.size);
    }
  }

  get bytes(): number {
    return this.stored;
  }

  close(): void {
    this.closeWrite();
    if (this.gapsFd !== null) closeSync(this.gapsFd);
    this.gapsFd = null;
    if (this.readCache) closeSync(this.readCache.fd);
    this.readCache = null;
    for (const segment of this.segments) this.account.give(segment.size);
    this.segments.length = 0;
    this.index.length = 0;
    this.head = 0;
    this.stored = 0;
    rmSync(this.dir, { recursive: true, force: true });
  }

  private closeWrite(): void {
    if (this.writeFd !== null) closeSync(this.writeFd);
    this.writeFd = null;
  }

  private find(seq: number): number {
    let lo = this.head;
    let hi = this.index.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.index[mid]!.seq < seq) lo = mid + 1;
      else hi = mid;
    }
    return lo < this.index.length && this.index[lo]!.seq === seq ? lo : -1;
  }
}

/**
 * The gaps a predecessor kept in `path` (none if there is no such file), read as untrusted
 * input: bounded, each a run of safe integers, ascending and apart; throws saying what is wrong.
 */
function readGaps(path: string): KeptGap[] {
  let fd: number;
  try {
    fd = openSync(path, fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw new Error(`output spill: its keep-last gaps cannot be read (${(err as Error).message})`);
  }
  try {
    const max = GAPS_HEADER + MAX_KEPT_GAPS * GAP_BYTES;
    const buffer = Buffer.alloc(max);
    let length = 0;
    for (;;) {
      const n = readSync(fd, buffer, length, max - length, length);
      if (n === 0 || (length += n) === max) break;
    }
    const fail = (what: string): never => {
      throw new Error(`output spill: its keep-last gaps are not valid (${what})`);
    };
    if (length < GAPS_HEADER) fail(`${length} bytes`);
    const count = buffer.readUInt32LE(0);
    if (count > MAX_KEPT_GAPS || GAPS_HEADER + count * GAP_BYTES > length) fail(`${count} gaps in ${length} bytes`);
    const gaps: KeptGap[] = [];
    for (let i = 0; i < count; i++) {
      const at = GAPS_HEADER + i * GAP_BYTES;
      const g = { first: buffer.readDoubleLE(at), last: buffer.readDoubleLE(at + 8), bytes: buffer.readDoubleLE(at + 16) };
      const previous = gaps.length > 0 ? gaps[gaps.length - 1]!.last : 0;
      const ok = Number.isSafeInteger(g.first) && Number.isSafeInteger(g.last) && Number.isSafeInteger(g.bytes) && g.first > previous && g.last >= g.first && g.bytes >= 0;
      if (!ok) fail(`gap ${i}: ${JSON.stringify(g)}`);
      gaps.push(g);
    }
    return gaps;
  } finally {
    closeSync(fd);
  }
}
