/**
 * What a supervisor remembers of its failures, pure (the clock is injected): the error that
 * explains the current state (`lastError`, null while connected), why it stopped retrying
 * (`reason`, for `failed` and `requires_reauth`), and the last failure kept after a recovery
 * (when it happened, when the server came back) with the number of recoveries, so a server
 * that crashed and came back does not look as if nothing had happened.
 */
export interface LastFailure {
  /** The latest error (of the failure, or of the latest attempt that failed since). */
  error: string;
  /** When it went down (epoch ms): the first failure since it was last connected. */
  at: number;
  /** When the latest attempt failed (epoch ms): `at` until a retry fails too. */
  lastAttemptAt: number;
  /** When it was connected again (epoch ms), or null while it is not. */
  recoveredAt: number | null;
}

export class FailureRecord {
  private current: string | null = null;
  private stopReason: string | null = null;
  private stopIsPermanent = false;
  private last: LastFailure | null = null;
  private recoveries = 0;

  constructor(private readonly now: () => number = Date.now) {}

  /** The error explaining the current state; null while connected. */
  get lastError(): string | null {
    return this.current;
  }

  /** Why automatic retries stopped (`failed`, `requires_reauth`), or null. */
  get reason(): string | null {
    return this.stopReason;
  }

  get lastFailure(): LastFailure | null {
    return this.last ? { ...this.last } : null;
  }

  /** It stopped for a reason no attempt can change (a refused protocol version): calls do not try again either. */
  get permanent(): boolean {
    return this.stopReason !== null && this.stopIsPermanent;
  }

  /** Times the server was connected again after a failure. */
  get restarts(): number {
    return this.recoveries;
  }

  /**
   * An attempt or a connection failed with `error`. While it stays down, a retry that fails
   * too keeps when it went down (`at`) and moves only `lastAttemptAt` and the error.
   */
  fail(error: string): void {
    this.current = error;
    const now = this.now();
    if (this.last && this.last.recoveredAt === null) {
      this.last.error = error;
      this.last.lastAttemptAt = now;
    } else {
      this.last = { error, at: now, lastAttemptAt: now, recoveredAt: null };
    }
  }

  /** Automatic retries stopped for `reason`. */
  stop(reason: string, permanent = false): void {
    this.stopReason = reason;
    this.stopIsPermanent = permanent;
  }

  /** A retry was asked for (manual, reload): the stop reason no longer holds. */
  retrying(): void {
    this.stopReason = null;
    this.stopIsPermanent = false;
  }

  /** Connected: the current error is over; the last failure is kept, marked recovered. */
  connected(): void {
    if (this.last && this.last.recoveredAt === null) {
      this.last.recoveredAt = this.now();
      this.recoveries += 1;
    }
    this.current = null;
    this.retrying();
  }
}
