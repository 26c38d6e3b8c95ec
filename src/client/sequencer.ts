/**
 * Puts one process's events in `seq` order, exactly once, from two sources that overlap:
 * notifications (pushed, possibly out of order or duplicated across connections) and
 * `process/read` answers (pulled after a reconnect, or to fill a hole). It also turns a read
 * answer's `exited`/`exitCode`/`closed`/`nextSeq` back into the exit and close events it
 * stands for, and finds holes nobody can fill any more (output evicted by the server).
 * Pure bookkeeping: no I/O, so it is tested on its own.
 */
import type { OutputStream, ProcessReadResult } from '../protocol/index.js';
import type { ByteArena } from '../util/byte-arena.js';

/** One event of a process, in `seq` order (what iterating an `ExecProcess` yields). */
export type ProcessEvent =
  | { type: 'output'; seq: number; stream: OutputStream; data: Buffer }
  | { type: 'exit'; seq: number; exitCode: number }
  | { type: 'close'; seq: number };

/** A `ProcessEvent` as the client carries it: output may hold its bytes in pieces, in reused memory. */
export type SequencedEvent =
  | (Extract<ProcessEvent, { type: 'output' }> & {
      /**
       * The bytes in the pieces they arrived in (binary frames): the client writes them on
       * as they are, and `data` joins them only when someone reads it.
       */
      parts?: readonly Buffer[];
      /** The reused memory its pieces are views into (released once a sink wrote them). */
      memory?: ByteArena;
    })
  | Exclude<ProcessEvent, { type: 'output' }>;

export interface Gap {
  fromSeq: number;
  toSeq: number;
}

export class Sequencer {
  /** Highest seq handed to the consumer; everything at or below it is dropped as a duplicate. */
  lastDelivered = 0;
  private readonly pending = new Map<number, SequencedEvent>();
  private exitKnown = false;
  private closeKnown = false;
  /** Highest seq the server is known to have produced (from notifications or nextSeq). */
  private highWater = 0;

  private lastDeliveredIsClose = false;
  /** `--keep-last` gaps told by the server and not reached yet: first seq → last seq dropped. */
  private readonly pendingSkips = new Map<number, number>();
  /** Gaps passed over by the last `push`/`skip`, for the caller to report (`takeSkipped`). */
  private skipped: Gap[] = [];

  /** The close event (always the last) has been delivered. */
  get done(): boolean {
    return this.lastDeliveredIsClose;
  }

  get exitSeen(): boolean {
    return this.exitKnown;
  }

  /** Accepts one event; returns every event that became deliverable, in order. */
  push(event: SequencedEvent): SequencedEvent[] {
    this.add(event);
    return this.drain();
  }

  /** True when something later than the next expected seq is waiting: a hole to fill. */
  /** Whether an event with this seq would be kept (not a duplicate of one delivered or held). */
  accepts(seq: number): boolean {
    return seq > this.lastDelivered && !this.pending.has(seq);
  }

  get hasHole(): boolean {
    return (this.pending.size > 0 || this.pendingSkips.size > 0) && !this.pending.has(this.lastDelivered + 1) && !this.pendingSkips.has(this.lastDelivered + 1);
  }

  /**
   * Merges a `process/read` answer (asked with `afterSeq`, without `maxBytes`). Returns the
   * deliverable events, and the range that is missing for good if the answer shows a hole
   * (evicted output). After a gap, the sequencer is left as it was: the caller fails the process.
   */
  mergeRead(afterSeq: number, result: ProcessReadResult): { events: SequencedEvent[]; gap: Gap | null } {
    for (const chunk of result.chunks) {
      this.add({ type: 'output', seq: chunk.seq, stream: chunk.stream, data: Buffer.from(chunk.chunk, 'base64') });
    }
    const nextSeq = result.nextSeq;
    this.highWater = Math.max(this.highWater, nextSeq - 1);
    if (result.closed && !this.closeKnown) this.add({ type: 'close', seq: nextSeq - 1 });
    // Every seq below `end` exists (output, or the exit event); find those we do not hold.
    const end = nextSeq;
    const floor = Math.max(afterSeq, this.lastDelivered);
    const missing: number[] = [];
    for (let s = floor + 1; s < end; s++) if (!this.pending.has(s) && !this.inPendingSkip(s)) missing.push(s);
    if (result.exited && !this.exitKnown && result.exitCode !== null) {
      const exitSeq = pickExitSeq(missing, result.chunks.map((c) => c.seq));
      if (exitSeq !== undefined) {
        missing.splice(missing.indexOf(exitSeq), 1);
        this.add({ type: 'exit', seq: exitSeq, exitCode: result.exitCode });
      }
    }
    if (missing.length > 0) return { events: [], gap: { fromSeq: missing[0]!, toSeq: missing[missing.length - 1]! } };
    return { events: this.drain(), gap: null };
  }

  private add(event: SequencedEvent): void {
    if (event.seq <= this.lastDelivered || this.pending.has(event.seq)) return;
    if (event.type === 'exit') {
      if (this.exitKnown) return;
      this.exitKnown = true;
    }
    if (event.type === 'close') {
      if (this.closeKnown) return;
      this.closeKnown = true;
    }
    this.highWater = Math.max(this.highWater, event.seq);
    this.pending.set(event.seq, event);
  }

  /**
   * `process/gap` (extension `keepLast`): the server dropped seqs `first`..`last` unread. Once
   * everything before `first` is delivered, delivery goes on after `last`; the range passed
   * over (without what was delivered already: a resent gap, or chunks that arrived before the
   * drop) is reported by `takeSkipped`. Returns the events that became deliverable.
   */
  skip(first: number, last: number): SequencedEvent[] {
    if (last <= this.lastDelivered) return [];
    first = Math.max(first, this.lastDelivered + 1);
    const known = this.pendingSkips.get(first);
    if (known === undefined || known < last) this.pendingSkips.set(first, last);
    this.highWater = Math.max(this.highWater, last);
    return this.drain();
  }

  /** Whether `seq` is in a gap told and not reached yet (dropped by the server, never missing). */
  private inPendingSkip(seq: number): boolean {
    for (const [first, last] of this.pendingSkips) if (seq >= first && seq <= last) return true;
    return false;
  }

  /** The gaps passed over since the last call, in order. */
  takeSkipped(): Gap[] {
    const out = this.skipped;
    if (out.length > 0) this.skipped = [];
    return out;
  }

  private drain(): SequencedEvent[] {
    const out: SequencedEvent[] = [];
    for (;;) {
      const skipTo = this.pendingSkips.size > 0 ? this.pendingSkips.get(this.lastDelivered + 1) : undefined;
      if (skipTo !== undefined) {
        this.pendingSkips.delete(this.lastDelivered + 1);
        this.skipped.push({ fromSeq: this.lastDelivered + 1, toSeq: skipTo });
        for (let s = this.lastDelivered + 1; s <= skipTo; s++) this.pending.delete(s);
        this.lastDelivered = skipTo;
        continue;
      }
      const next = this.pending.get(this.lastDelivered + 1);
      if (!next) break;
      this.pending.delete(next.seq);
      this.lastDelivered = next.seq;
      this.lastDeliveredIsClose = next.type === 'close';
      out.push(next);
    }
    return out;
  }
}

/**
 * Which missing seq is the exit event? The server evicts the oldest output first, so every
 * evicted seq is below every retained chunk: a missing seq above the first retained chunk
 * can only be the exit; otherwise the exit is the newest missing seq. (If the answer also
 * has a real hole, the process fails anyway and the guess only affects the error's range.)
 */
function pickExitSeq(missing: number[], retained: number[]): number | undefined {
  if (missing.length === 0) return undefined;
  const firstRetained = retained.length ? Math.min(...retained) : Infinity;
  const above = missing.filter((s) => s > firstRetained);
  if (above.length > 0) return above[0];
  return missing[missing.length - 1];
}

/** An output event whose bytes came in pieces: `data` is joined on first use only. */
export function outputEvent(seq: number, stream: OutputStream, parts: readonly Buffer[]): SequencedEvent {
  if (parts.length === 1) return { type: 'output', seq, stream, data: parts[0]! };
  let joined: Buffer | undefined;
  return {
    type: 'output',
    seq,
    stream,
    parts,
    get data(): Buffer {
      return (joined ??= Buffer.concat(parts));
    },
  };
}
