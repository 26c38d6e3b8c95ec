/**
 * The default deadlines of one `http/request`: a connect timeout (no connection to the host
 * within 30 s) and an idle timeout (no byte from it, headers or body, for 60 s) — not
 * a total one, so a long body that keeps coming is never cut. The time the server itself
 * waits (for its client to read, for memory) does not count as idle. Pure: the timer
 * functions are injected, tests drive them with fake timers.
 */

export interface HttpTimeoutLimits {
  /** Milliseconds to connect (each redirect hop too); default 30 s. */
  connectMs: number;
  /** Milliseconds without a byte from upstream; default 60 s. */
  idleMs: number;
}

export const HttpTimeoutDefaults: HttpTimeoutLimits = { connectMs: 30_000, idleMs: 60_000 };

export interface Timers {
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

const realTimers: Timers = {
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

export class RequestTimeouts {
  private timer: unknown;
  private phase: 'connecting' | 'idle' | 'paused' | 'done' = 'paused';

  constructor(
    private readonly limits: HttpTimeoutLimits,
    /** Called once, with the reason, when a deadline passes. */
    private readonly expired: (reason: Error) => void,
    private readonly timers: Timers = realTimers,
  ) {}

  /** A connection is being made (the request, or a redirect hop). */
  connecting(): void {
    this.arm('connecting', this.limits.connectMs, () => new Error(`could not connect within ${this.limits.connectMs / 1000} s`));
  }

  /** Connected, or a byte came: the idle clock starts again. */
  activity(): void {
    this.arm('idle', this.limits.idleMs, () => new Error(`no data for ${this.limits.idleMs / 1000} s`));
  }

  /** The server waits on its own side (its client, its memory): nothing is idle meanwhile. */
  pause(): void {
    if (this.phase === 'done') return;
    this.timers.clearTimeout(this.timer);
    this.phase = 'paused';
  }

  /** Finished: no deadline any more. */
  stop(): void {
    this.timers.clearTimeout(this.timer);
    this.phase = 'done';
  }

  private arm(phase: 'connecting' | 'idle', ms: number, reason: () => Error): void {
    if (this.phase === 'done') return;
    this.timers.clearTimeout(this.timer);
    this.phase = phase;
    this.timer = this.timers.setTimeout(() => {
      this.phase = 'done';
      this.expired(reason());
    }, ms);
  }
}
