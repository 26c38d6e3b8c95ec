/**
 * What of an output log (output-log.ts) a client could have seen, and telling its observer
 * (restart adoption, log-restore.ts): `seq` is the highest seq exposed (sent, returned by a read,
 * skipped over or acknowledged; the log seals it against appends), each entry it passes is
 * told to the observer once, in order, with its keeper stream's END offset, and so is the
 * highest seq the log let go of. Pure.
 */
import type { OutputStream } from '../../../protocol/index.js';
import { indexAfter, type LogEntry, type OutputLogObserver } from './log-entries.js';
import { StreamOffsets } from './log-restore.js';

export class LogExposure {
  /** Highest seq a client could have seen. */
  seq = 0;
  /** The highest seq the observer was told is dropped. */
  private droppedSeq = 0;

  constructor(
    private readonly observer: OutputLogObserver | undefined,
    /** Per keeper stream: bytes recorded and bytes exposed (the observer's END offsets). */
    private readonly offsets = new StreamOffsets(),
  ) {}

  /** A restored log (log-restore.ts `restorePlan`): exposed and dropped up to where its keeper knew. */
  static restored(observer: OutputLogObserver | undefined, offsets: StreamOffsets, exposedSeq: number, droppedSeq: number): LogExposure {
    const exposure = new LogExposure(observer, offsets);
    exposure.seq = exposedSeq;
    exposure.droppedSeq = droppedSeq;
    return exposure;
  }

  /** `bytes` of `stream` were recorded. */
  appended(stream: OutputStream, bytes: number): void {
    this.offsets.appended(stream, bytes);
  }

  /** Moves `seq` to `to`, telling the observer of each entry of `entries` (kept from `head`) it passes, in order. */
  expose(entries: readonly LogEntry[], head: number, to: number): void {
    if (to <= this.seq) return;
    const observer = this.observer;
    for (let i = observer ? indexAfter(entries, head, this.seq) : entries.length; i < entries.length; i++) {
      const e = entries[i]!;
      if (e.seq > to) break;
      observer!.exposed(e.kind === 'output' ? { kind: 'output', seq: e.seq, stream: e.stream, end: this.offsets.expose(e.stream, e.bytes) } : { kind: e.kind, seq: e.seq });
    }
    this.seq = to;
  }

  /** The log let go of every entry up to `seq`. */
  dropped(seq: number): void {
    if (seq <= this.droppedSeq) return;
    this.droppedSeq = seq;
    this.observer?.dropped(seq);
  }

  /** Everything up to `seq` is gone without being exposed (the log discarded it). */
  discarded(seq: number): void {
    this.seq = seq;
    this.offsets.passAll();
    this.dropped(seq);
  }
}
