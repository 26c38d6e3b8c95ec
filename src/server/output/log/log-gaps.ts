/**
 * `--keep-last` (extension `keepLast`) in the output log (output-log.ts): when the log is at
 * its limit — more unacknowledged output than `keepLastBytes`, or a full window that cannot
 * spill (the spill refused, or there is none) — its oldest unacknowledged output chunks are
 * dropped instead of pausing the child. Here: that limit, and the runs of seqs dropped (gaps),
 * which the client is told of before the next entry sent, again on every connection until it
 * acknowledges past them. Pure.
 */
import type { OutputGap } from './log-entries.js';

export class LogGaps {
  /** Runs of dropped seqs the client has not acknowledged past, oldest first. */
  private gaps: OutputGap[] = [];
  /** The newest gap end told on the current connection (0: none yet). */
  private toldThrough = 0;

  /** `keepLastBytes` (undefined: nothing is ever dropped). */
  constructor(private readonly limit: number | undefined) {}

  /**
   * The log is at its keep-last limit: `unackedBytes` of unacknowledged output,
   * `memoryUnackedBytes` of it in memory against `windowBytes`, and whether the spill takes more.
   */
  atLimit(unackedBytes: number, memoryUnackedBytes: number, windowBytes: number, spillTakes: boolean): boolean {
    if (this.limit === undefined) return false;
    const windowFull = memoryUnackedBytes >= windowBytes && !spillTakes;
    return unackedBytes > this.limit || windowFull;
  }

  /** Output chunk `seq` (`bytes` long) was dropped unread: it joins the newest gap, or opens one. */
  record(seq: number, bytes: number): void {
    const last = this.gaps[this.gaps.length - 1];
    if (last && last.last === seq - 1) {
      last.last = seq;
      last.bytes += bytes;
    } else {
      this.gaps.push({ first: seq, last: seq, bytes });
    }
  }

  /** The gap the client must be told of next on this connection (now counted as told), or undefined. */
  take(): OutputGap | undefined {
    const gap = this.gaps.find((g) => g.last > this.toldThrough);
    if (gap) this.toldThrough = gap.last;
    return gap;
  }

  /** The gaps the client has not acknowledged past. */
  get pending(): readonly OutputGap[] {
    return this.gaps;
  }

  /** A new connection: every pending gap is told again. */
  rewind(): void {
    this.toldThrough = 0;
  }

  /** The client acknowledged (or delivered) `seq`: the gaps before it were told and are done with. Returns whether any went. */
  forgetBefore(seq: number): boolean {
    const before = this.gaps.length;
    while (this.gaps.length > 0 && this.gaps[0]!.last < seq) this.gaps.shift();
    return this.gaps.length !== before;
  }

  /**
   * A restored log (restart adoption): the gaps its predecessor had not seen acknowledged past,
   * oldest first, told again (before anything else) on the next connection.
   */
  restored(gaps: readonly OutputGap[]): void {
    this.gaps = gaps.map((g) => ({ ...g }));
    this.toldThrough = 0;
  }
}
