/**
 * One process's output log: numbers its events (one sequence shared by output, exit and
 * close), keeps what a client has not acknowledged, keeps a bounded history of what it has
 * for `process/read`, knows what to send next on the current connection, and decides
 * whether the child may be read. Pure bookkeeping — no sockets, no timers, no child — so it
 * is tested on its own (test/unit/server/output/log/output-log.test.ts), like the client's sequencer. Its
 * cursors and byte counts (acknowledged, sent, next) are log-state.ts; its entries, their
 * bytes and its options, log-entries.ts; what a `process/read` takes, log-read.ts; what a
 * client could have seen, told to a kept keeper, log-exposure.ts (and a log rebuilt from that
 * keeper, log-restore.ts); the acknowledged history and its eviction, log-history.ts; output
 * past the window on disk, log-spill.ts; `--keep-last`'s gaps, log-gaps.ts; whether to read
 * the child, read-decision.ts.
 *
 * While nothing is sent yet (the socket is busy, or nobody is attached), new output of the
 * same stream is appended to the newest chunk, up to `maxChunkBytes`: fewer, larger frames.
 */
import type { OutputStream } from '../../../protocol/index.js';
import { dropOutput, indexAfter, outputBytesBetween, sealOutput, type LogEntry, type OutputEntry, type OutputGap, type OutputLogOptions } from './log-entries.js';
import { LogExposure } from './log-exposure.js';
import { LogGaps } from './log-gaps.js';
import { readChunks, watchChunks, type ReadAnswer } from './log-read.js';
import { restorePlan, type RestoreState } from './log-restore.js';
import { LogState } from './log-state.js';

export {
  outputParts,
  type CloseEntry,
  type ExitEntry,
  type ExposedEntry,
  type LogEntry,
  type OutputEntry,
  type OutputGap,
  type OutputLogObserver,
  type OutputLogOptions,
  type OutputMemory,
} from './log-entries.js';
export { shouldReadChild, type ReadDecisionInputs } from '../read-decision.js';
export type { RestoreMark, RestoreState } from './log-restore.js';
export type { ReadAnswer, ReadChunk } from './log-read.js';

export class OutputLog extends LogState {
  /** What a client could have seen (sealed against appends), told to the observer (log-exposure.ts). */
  private exposure: LogExposure;
  /**
   * Codex dialect, after a resume: the output recorded while the client was away waits for
   * it to read it back with `process/read` (nothing is sent meanwhile), so a client that
   * catches up by reading gets every byte from its reads, in order.
   */
  private _holding = false;
  /** `--keep-last`: its limit, and the runs of seqs dropped unread (log-gaps.ts). */
  private readonly gaps: LogGaps;

  constructor(options: OutputLogOptions) {
    super(options);
    this.exposure = new LogExposure(options.observer);
    this.gaps = new LogGaps(options.keepLastBytes);
  }

  // ---- recording ---------------------------------------------------------------------------

  /**
   * Rebuilds a kept process's log in a successor server from what its keeper kept
   * (log-restore.ts): the entries clients may have seen keep their seqs, exposed and not
   * acknowledged (a resuming client's acks skip what it has); bytes after them are new entries.
   */
  static restore(options: OutputLogOptions, state: RestoreState): OutputLog {
    const plan = restorePlan(state);
    // `--keep-last`: a drop takes the oldest unacknowledged chunk, so everything up to the
    // newest gap was acknowledged or dropped before the restart; what the spill or the keeper
    // still holds of it (a drop it was not told of yet) goes, and the gaps are told as they were.
    const gaps = state.gaps ?? [];
    const through = gaps.length > 0 ? gaps[gaps.length - 1]!.last : 0;
    if (through > plan.exposedSeq) throw new Error(`restore: keep-last gap through seq ${through}, past the keeper's last mark ${plan.exposedSeq}`);
    const entries = through > plan.ackedSeq ? plan.entries.filter((e) => e.seq > through) : plan.entries;
    const log = new OutputLog(options);
    log.entries = entries;
    log.nextSeq = plan.exposedSeq + 1;
    log._ackedSeq = log._sentSeq = Math.max(plan.ackedSeq, through);
    log.exposure = LogExposure.restored(options.observer, plan.offsets, plan.exposedSeq, plan.ackedSeq);
    log._exitSeq = plan.exitSeq;
    log._closeSeq = plan.closeSeq;
    log._totalBytes = log._unackedBytes = log._unsentBytes = outputBytesBetween(entries, 0, 0, Infinity);
    log.spill.restored(entries);
    if (through > plan.ackedSeq) {
      log.spill.free(through, 0);
      log.exposure.dropped(through);
    }
    log.gaps.restored(gaps);
    const chunk = options.maxChunkBytes;
    for (const { stream, data } of plan.leftovers) {
      for (let at = 0; at < data.length; at += chunk) log.append(stream, data.subarray(at, at + chunk));
    }
    return log;
  }

  /** Records output read from the child (the log now holds `data`'s reference, see `memory`). */
  append(stream: OutputStream, data: Buffer): void {
    if (data.length === 0) return;
    this.exposure.appended(stream, data.length);
    this._totalBytes += data.length;
    this._unackedBytes += data.length;
    this._unsentBytes += data.length;
    const last = this.entries.length > this.head ? this.entries[this.entries.length - 1]! : undefined;
    if (
      last?.kind === 'output' &&
      !last.spilled &&
      last.seq > this.exposure.seq &&
      last.stream === stream &&
      last.bytes + data.length <= this.options.maxChunkBytes
    ) {
      const merged = last.parts === null ? this.options.memory?.extend(last.data, data) : null;
      if (merged) last.data = merged;
      else (last.parts ??= [last.data]).push(data);
      last.bytes += data.length;
      this.spillExcess();
      this.keepLast();
      return;
    }
    this.entries.push({ kind: 'output', seq: this.nextSeq++, stream, bytes: data.length, data, parts: null });
    this.spillExcess();
    this.keepLast();
  }

  /** Records the exit; returns its seq. */
  recordExit(exitCode: number): number {
    if (this._exitSeq !== null) return this._exitSeq;
    this._exitSeq = this.nextSeq++;
    this.entries.push({ kind: 'exit', seq: this._exitSeq, exitCode });
    return this._exitSeq;
  }

  /** Records the close (always the last event); returns its seq. */
  recordClose(): number {
    if (this._closeSeq !== null) return this._closeSeq;
    this._closeSeq = this.nextSeq++;
    this.entries.push({ kind: 'close', seq: this._closeSeq });
    return this._closeSeq;
  }

  // ---- sending -----------------------------------------------------------------------------

  /**
   * `--keep-last`: the dropped run the client must be told of before the next entry sent
   * (now counted as told on this connection), or undefined. A gap is told again on every
   * connection until the client acknowledges past it.
   */
  takeGap(): OutputGap | undefined {
    return this._holding ? undefined : this.gaps.take();
  }

  /** The runs of seqs dropped by `--keep-last` that the client has not acknowledged past. */
  get pendingGaps(): readonly OutputGap[] {
    return this.gaps.pending;
  }

  /** Something is waiting to be sent (and may be: not held). */
  get hasSendable(): boolean {
    return !this._holding && this._sentSeq < this.nextSeq - 1;
  }

  /**
   * The next entry to send, now counted as sent (and sealed against appends); undefined if
   * none. `join`: an output chunk read in pieces is joined into one Buffer (`data`); without
   * it the pieces may stay apart (`outputParts`), for a sender that sends them as they are.
   */
  takeNext(join = true): LogEntry | undefined {
    if (!this.hasSendable) return undefined;
    const i = this.indexAfter(this._sentSeq);
    const entry = this.entries[i];
    if (!entry) return undefined;
    this._sentSeq = entry.seq;
    this.expose(entry.seq);
    if (entry.kind === 'output') {
      this._unsentBytes -= entry.bytes;
      // Read back from the spill for this send only: memory holds it while the socket does.
      if (entry.spilled) return { ...entry, data: this.spill.read(entry), parts: null, spilled: undefined };
      if (join) this.seal(entry);
    }
    return entry;
  }

  /**
   * The connection that was sending went away: nothing after the acknowledged point counts
   * as sent any more; the next connection gets it again, in order.
   */
  rewind(): void {
    this.gaps.rewind();
    if (this._sentSeq === this._ackedSeq) return;
    this._sentSeq = this._ackedSeq;
    this._unsentBytes = this._unackedBytes;
  }

  /**
   * A resuming client says it already has everything up to `seq` (it delivered it before the
   * cut, without having acknowledged all of it): sending starts after it.
   */
  skipTo(seq: number): void {
    seq = Math.min(seq, this.nextSeq - 1);
    this.forgetGapsBefore(seq);
    if (seq <= this._sentSeq) return;
    this._unsentBytes -= this.bytesBetween(this._sentSeq, seq);
    this._sentSeq = seq;
    this.expose(seq);
  }

  // ---- acknowledgement ---------------------------------------------------------------------

  /** Codex dialect: the kernel took every frame of this process up to `seq`. */
  written(seq: number): void {
    if (!this.options.clientAcks) this.acknowledge(seq);
  }

  /**
   * Everything up to `seq` is acknowledged: it becomes history (evictable beyond retention)
   * and no longer counts against the window. Returns true if that moved anything.
   */
  acknowledge(seq: number): boolean {
    seq = Math.min(seq, this.nextSeq - 1);
    this.forgetGapsBefore(seq);
    if (seq <= this._ackedSeq) return false;
    const bytes = this.bytesBetween(this._ackedSeq, seq);
    this._unackedBytes -= bytes;
    this.history.bytes += bytes;
    if (seq > this._sentSeq) {
      // Acknowledged before it was sent (read back): never send it.
      this._unsentBytes -= this.bytesBetween(this._sentSeq, seq);
      this._sentSeq = seq;
    }
    this._ackedSeq = seq;
    this.expose(seq);
    this.evict();
    // The spill may have room again (freed, or under its quota): what memory holds past the window goes there.
    this.spillExcess();
    return true;
  }

  /** The client acknowledged everything up to the close: the history is not needed any more. */
  dropHistory(): void {
    this.history.keepNone();
    this.evict();
  }

  /**
   * The server's memory budget (memory/memory-budget.ts) is past its pause mark: acknowledged history —
   * output the client consumed (or, in the Codex dialect, the kernel took) — is the one thing
   * held that may go, so none is kept until the pressure is over. Unacknowledged output is
   * never dropped: its child is paused instead (`shouldReadChild`).
   */
  squeezeHistory(squeezed: boolean): void {
    this.history.squeeze(squeezed);
    this.evict();
  }

  /** The process is gone for good (its session ended, or it was removed): free every byte. */
  discard(): void {
    for (let i = this.head; i < this.entries.length; i++) {
      const e = this.entries[i]!;
      if (e.kind === 'output') this.drop(e);
    }
    this.entries = [];
    this.head = 0;
    this.spill.discard();
    this.history.bytes = 0;
    this._unackedBytes = 0;
    this._unsentBytes = 0;
    this._holding = false;
    this._ackedSeq = this._sentSeq = this.nextSeq - 1;
    this.exposure.discarded(this.nextSeq - 1);
  }

  // ---- the Codex-dialect resume hold ---------------------------------------------------------

  /** After a resume without acks: hold the output the client has not received until it reads it back. */
  holdBacklog(): void {
    this._holding = this._ackedSeq < this.lastOutputSeq;
  }

  /** Send the held backlog after all (the client did not read it in time). */
  releaseHold(): void {
    this._holding = false;
  }

  get holding(): boolean {
    return this._holding;
  }

  // ---- reading -----------------------------------------------------------------------------

  /**
   * `process/read`: kept output with seq > afterSeq, in order, never split. At most
   * `maxBytes` and `capBytes` (the server's limit on one answer), but at least one chunk;
   * `nextSeq` is the last returned chunk's + 1 when `maxBytes` was given or the cap cut the
   * answer short, else the process's next seq. In the Codex dialect the answer acknowledges
   * what it covers; once a held backlog is read to its end, the process is sent live again.
   */
  read(afterSeq: number, maxBytes: number | null, capBytes: number): ReadAnswer {
    const { chunks: out, truncated } = readChunks(this.entries, this.head, afterSeq, Math.min(maxBytes ?? Infinity, capBytes), (e) => this.bytesOf(e));
    const lastReturned = out.length > 0 ? out[out.length - 1]!.seq : 0;
    this.expose(lastReturned);
    const nextSeq = out.length > 0 && (truncated || maxBytes !== null) ? lastReturned + 1 : this.nextSeq;
    if (!this.options.clientAcks) {
      // The reader holds everything up to afterSeq and the output this answer returned. The
      // exit and close events are still sent as notifications (what Codex clients wait for).
      this.acknowledge(Math.max(afterSeq, lastReturned));
      if (this._holding && this._ackedSeq >= this.lastOutputSeq) this._holding = false;
    }
    return { chunks: out, nextSeq };
  }

  /**
   * A watcher's `process/read` (extension `attach`): kept output after `afterSeq` as `read`
   * gives it (from memory or the spill), but it acknowledges nothing and leaves the hold and
   * what was sent as they are. `gap`: the seqs right after `afterSeq` no longer kept; the
   * answer stops before any later hole (`nextSeq` then points at it, for the next read).
   */
  watch(afterSeq: number, maxBytes: number | null, capBytes: number): ReadAnswer & { gap: { first: number; last: number } | null } {
    const answer = watchChunks(this.entries, this.head, afterSeq, this.nextSeq, maxBytes, capBytes, (e) => this.bytesOf(e));
    const last = answer.chunks[answer.chunks.length - 1];
    if (last) this.expose(last.seq);
    return answer;
  }

  // ---- internals -----------------------------------------------------------------------------

  /** Moves what memory holds past the window to the spill, if there is one (log-spill.ts); each chunk moved is exposed and dropped. */
  private spillExcess(): void {
    this.spill.spillExcess(this.entries, this.head, this._ackedSeq, this._unackedBytes, (seq) => {
      // Kept mode: the keeper marks it and lets go of its copy (it is on disk now), so it
      // reads on; a successor finds it in the spill (log-restore.ts).
      this.expose(seq);
      this.exposure.dropped(seq);
    });
  }

  /**
   * `--keep-last`: while the process is at its limit (log-gaps.ts), drops the oldest
   * unacknowledged output chunk (never an event, never the newest chunk) and records it in a
   * gap, so the child is never paused for its client.
   */
  private keepLast(): void {
    for (;;) {
      const spillTakes = this.spill.present && this.spill.refusal === null;
      if (!this.gaps.atLimit(this._unackedBytes, this.memoryUnackedBytes, this.options.windowBytes, spillTakes)) return;
      const i = this.indexAfter(this._ackedSeq);
      const e = this.entries[i];
      if (!e || e.kind !== 'output' || i === this.entries.length - 1) return;
      this.dropUnread(i, e);
      if (this.spill.refusal) this.spillExcess();
    }
  }

  /** Drops entry `i` (`e`, the oldest unacknowledged one, output) unread, into a gap. */
  private dropUnread(i: number, e: OutputEntry): void {
    this.expose(e.seq);
    // The gap is kept for a successor (the spill's store) before anything of the chunk goes:
    // its record on disk, or the keeper's copy (restart adoption, log-restore.ts).
    this.gaps.record(e.seq, e.bytes);
    this.spill.keptGaps(this.gaps.pending);
    this._unackedBytes -= e.bytes;
    if (e.seq > this._sentSeq) {
      this._unsentBytes -= e.bytes;
      this._sentSeq = e.seq;
    }
    if (e.spilled) this.spill.free(e.seq, e.bytes);
    else this.drop(e);
    this._ackedSeq = e.seq;
    this.entries.splice(i, 1);
    this.exposure.dropped(e.seq);
  }

  /** The client is past the gaps before `seq`: they go, here and in the spill's store. */
  private forgetGapsBefore(seq: number): void {
    if (this.gaps.forgetBefore(seq)) this.spill.keptGaps(this.gaps.pending);
  }

  /** An output chunk's bytes as one Buffer (joined, or read back from the spill). */
  private bytesOf(entry: OutputEntry): Buffer {
    if (entry.spilled) return this.spill.read(entry);
    this.seal(entry);
    return entry.data;
  }

  private indexAfter(seq: number): number {
    return indexAfter(this.entries, this.head, seq);
  }

  /** Output bytes of entries with from < seq <= to (all of them unacknowledged, so kept). */
  private bytesBetween(from: number, to: number): number {
    return outputBytesBetween(this.entries, this.head, from, to);
  }

  /** Drops the oldest acknowledged output beyond retention (log-history.ts); compacts the slots let go of. */
  private evict(): void {
    const { head, freedSeq, freedBytes } = this.history.evict(this.entries, this.head, this._ackedSeq, this.spill.through, this.options.memory);
    this.head = head;
    if (freedSeq > 0) this.spill.free(freedSeq, freedBytes);
    if (head > 0) this.exposure.dropped(this.entries[head - 1]!.seq);
    if (head > 1024 && head * 2 > this.entries.length) {
      this.entries = this.entries.slice(head);
      this.head = 0;
    }
  }

  /** Moves the exposed point to `seq`, telling the observer of each entry it passes, in order. */
  private expose(seq: number): void {
    this.exposure.expose(this.entries, this.head, seq);
  }

  private drop(entry: OutputEntry): void {
    dropOutput(entry, this.options.memory);
  }

  private seal(entry: OutputEntry): void {
    sealOutput(entry, this.options.memory);
  }

  /** Joins a chunk's pieces into `data` (once: later calls find it joined). */
  joinOutput(entry: OutputEntry): Buffer {
    this.seal(entry);
    return entry.data;
  }
}
