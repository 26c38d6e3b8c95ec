/**
 * How long a session keeps a closed process readable (session.ts): `closedRetentionMs` —
 * counted only while a client is attached, and (with acks) only once nothing of it is
 * unacknowledged: the client may still be consuming it, and an acknowledged close removes
 * it at once anyway. A timer that runs out while detached does nothing; `attach` arms it
 * again. Timers only: the session removes the process (`remove`).
 */

/** What the retention needs of a process: how much of its output the client has not acknowledged. */
export interface RetainedProcess {
  readonly unacknowledged: number;
}

export class ClosedRetention<P extends RetainedProcess> {
  private readonly timers = new Map<P, NodeJS.Timeout>();

  constructor(
    private readonly retentionMs: number,
    private readonly session: {
      /** A client is attached (detached: keep it for the returning client). */
      readonly attached: boolean;
      /** The client acknowledges what it consumed (extension `acks`). */
      readonly clientAcks: boolean;
      /** Its retention ran out: the session forgets it. */
      remove(proc: P): void;
    },
  ) {}

  /** `proc` closed (or a client attached): it goes after the retention, counted from now. */
  schedule(proc: P): void {
    const previous = this.timers.get(proc);
    if (previous) clearTimeout(previous);
    const timer = setTimeout(() => {
      this.timers.delete(proc);
      if (!this.session.attached) return;
      if (this.session.clientAcks && proc.unacknowledged > 0) return this.schedule(proc);
      this.session.remove(proc);
    }, this.retentionMs);
    timer.unref?.();
    this.timers.set(proc, timer);
  }

  /** `proc` goes now (or is kept for good): its timer is dropped. */
  cancel(proc: P): void {
    const timer = this.timers.get(proc);
    if (timer) clearTimeout(timer);
    this.timers.delete(proc);
  }

  /** The session ended: no timer is left. */
  clear(): void {
    for (const timer of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
  }
}
