/**
 * How an attached session sends its processes' events (session.ts): one event per process in
 * turn, so one busy process cannot starve another, and only while the connection's send
 * buffer is below its high-water mark (`congested`): what is not sent yet waits in the
 * processes' output logs, where the window bounds it. The connection calls `pump` again when
 * its buffer drained.
 */
import type { LogEntry, ManagedProcess, OutputGap } from '../output/index.js';

/** What the rotation sends to: the connection the session is attached to (session.ts SessionLink). */
export interface EventSink {
  /** Sends one event of `proc` (output, exit or close). */
  sendEntry(proc: ManagedProcess, entry: LogEntry): void;
  /** Tells the client a run of `proc`'s seqs was dropped (`--keep-last`, extension `keepLast`). */
  sendGap(proc: ManagedProcess, gap: OutputGap): void;
  /** The send buffer is above its high-water mark: wait for `pump` to be called again. */
  readonly congested: boolean;
}

export class SendRotation {
  /** The attached connection has answered initialize: events may flow. */
  private sending = false;
  /** Processes with something to send, in turn (a Set iterates in insertion order). */
  private readonly queue = new Set<ManagedProcess>();
  private pumping = false;

  /** `link`: the connection the session is attached to now (null: none). */
  constructor(private readonly link: () => EventSink | null) {}

  /**
   * The attached connection answered initialize: every process with something waiting takes
   * its turn and re-decides whether to read its child (it is attached now), and events flow.
   */
  start(processes: Iterable<ManagedProcess>): void {
    if (this.sending) return;
    this.sending = true;
    for (const proc of processes) {
      if (proc.sendable) this.queue.add(proc);
      proc.updateFlow();
    }
    this.pump();
  }

  /** The connection went away: nothing is sent or queued until the next one starts. */
  stop(): void {
    this.sending = false;
    this.queue.clear();
  }

  /** `proc` has something to send: while events flow, it takes its turn, and sending goes on. */
  ready(proc: ManagedProcess): void {
    if (!this.sending) return;
    this.queue.add(proc);
    this.pump();
  }

  /** `proc` has nothing left to send (done, or removed). */
  delete(proc: ManagedProcess): void {
    this.queue.delete(proc);
  }

  /** Nothing is queued any more. */
  clear(): void {
    this.queue.clear();
  }

  /** Whether events wait for the connection's buffer to drain. */
  get hasQueued(): boolean {
    return this.queue.size > 0;
  }

  /** Sends waiting events, one per process in turn, until the connection's buffer is full or nothing waits. */
  pump(): void {
    if (this.pumping) return;
    this.pumping = true;
    try {
      const link = this.link();
      if (!link || !this.sending) return;
      for (const proc of this.queue) {
        if (link.congested || this.link() !== link) return;
        this.queue.delete(proc);
        const gap = proc.takeGap();
        if (gap) link.sendGap(proc, gap);
        const entry = proc.takeNext();
        if (entry) link.sendEntry(proc, entry);
        // Back to the end of the rotation (iteration reaches it again after the others).
        if (proc.sendable) this.queue.add(proc);
      }
    } finally {
      this.pumping = false;
    }
  }
}
