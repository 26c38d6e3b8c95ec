/**
 * When a supervisor's connection attempts run: at most one in flight (a second caller joins
 * the first), and at most one scheduled after a delay (scheduling again replaces it). It
 * only times and serialises attempts; what an attempt does and what its outcome means are
 * the supervisor's.
 */
export type Trigger = 'initial' | 'retry' | 'call' | 'manual';

export class AttemptScheduler {
  private timer: NodeJS.Timeout | undefined;
  private dueAt: number | null = null;
  private running: Promise<boolean> | null = null;

  constructor(private readonly attempt: (trigger: Trigger) => Promise<boolean>) {}

  /** The attempt in flight, or null. */
  get inflight(): Promise<boolean> | null {
    return this.running;
  }

  /** When the scheduled attempt is due (epoch ms), or null when none is scheduled. */
  get nextRetryAt(): number | null {
    return this.dueAt;
  }

  /** Runs an attempt now (cancelling a scheduled one), or joins the one in flight. */
  run(trigger: Trigger): Promise<boolean> {
    if (this.running) return this.running;
    this.clear();
    const attempt = this.attempt(trigger).finally(() => {
      if (this.running === attempt) this.running = null;
    });
    this.running = attempt;
    return attempt;
  }

  /** Schedules a `retry` attempt after `delayMs`, replacing any scheduled one. */
  schedule(delayMs: number): void {
    this.clear();
    this.dueAt = Date.now() + delayMs;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.run('retry');
    }, delayMs);
  }

  /** Cancels the scheduled attempt, if any (one in flight runs on). */
  clear(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.dueAt = null;
  }
}
