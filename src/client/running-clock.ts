/**
 * Running time: the time this process was running, not the time it was suspended (SIGSTOP,
 * a laptop's sleep). The client's recovery deadline is counted on it, so a client that wakes
 * after hours goes on recovering instead of finding its deadline long past.
 *
 * Node's monotonic clocks (performance.now, process.hrtime) keep counting while a process is
 * stopped, so elapsed time alone cannot tell a stop from a wait. A periodic timer can: while
 * the process runs it ticks every `tickMs`; a stop (or sleep) shows as one gap between ticks
 * far longer than that. Running time advances by the elapsed time between ticks, except that
 * a gap longer than `maxGapMs` counts as one tick: the process was not running then.
 *
 * The numbers: a tick every 500 ms (two wake-ups a second, and only while a deadline is being
 * measured: a recovery or the first connect); a gap over 2 s (four ticks) counts as 500 ms. So
 * a stop of any length costs at most 500 ms of a deadline, and an event loop blocked for
 * more than 2 s (a busy machine) lengthens a deadline rather than shortening it: the clock
 * errs on the side of patience. Between ticks, `elapsed()` counts the time since the last
 * tick up to one tick, so it never runs backwards and never counts a stop it has not seen.
 *
 * Pure apart from the injected clock and timers (test/unit/client/running-clock.test.ts).
 */
import { performance } from 'node:perf_hooks';

export const RUNNING_TICK_MS = 500;
/** A gap between ticks longer than this was a suspension: it counts as one tick. */
export const RUNNING_MAX_GAP_MS = 2_000;

type Handle = ReturnType<typeof setTimeout>;

/** The timers the clock uses (the globals by default: fake timers replace them in tests). */
export interface RunningTimers {
  setInterval(fn: () => void, ms: number): Handle | number;
  clearInterval(handle: Handle | number): void;
  setTimeout(fn: () => void, ms: number): Handle | number;
  clearTimeout(handle: Handle | number): void;
}

export interface RunningClockOptions {
  /** Monotonic milliseconds (performance.now). */
  now?: () => number;
  timers?: RunningTimers;
  tickMs?: number;
  maxGapMs?: number;
}

export class RunningClock {
  private running = 0;
  private last: number;
  private ticker: Handle | number | undefined;
  private readonly now: () => number;
  private readonly timers: RunningTimers;
  private readonly tickMs: number;
  private readonly maxGapMs: number;

  /** Starts counting (and ticking) now; `stop()` ends it. */
  constructor(options: RunningClockOptions = {}) {
    this.now = options.now ?? (() => performance.now());
    this.timers = options.timers ?? globalTimers();
    this.tickMs = options.tickMs ?? RUNNING_TICK_MS;
    this.maxGapMs = Math.max(this.tickMs, options.maxGapMs ?? RUNNING_MAX_GAP_MS);
    this.last = this.now();
    this.ticker = this.timers.setInterval(() => this.tick(), this.tickMs);
    // The ticks only measure: they never keep the process alive.
    (this.ticker as { unref?: () => void }).unref?.();
  }

  /** Running milliseconds since the clock started. */
  elapsed(): number {
    if (this.ticker === undefined) return this.running;
    return this.running + Math.min(Math.max(0, this.now() - this.last), this.tickMs);
  }

  /** Stops ticking; `elapsed()` keeps its last value. Idempotent. */
  stop(): void {
    if (this.ticker === undefined) return;
    this.tick();
    this.timers.clearInterval(this.ticker);
    this.ticker = undefined;
  }

  /**
   * Calls `fn` once `ms` more of running time has passed. The timer is a plain one for the
   * running time still missing (running time never passes faster than the monotonic clock),
   * armed again when it fires early because the process was stopped meanwhile.
   */
  after(ms: number, fn: () => void, { unref = false }: { unref?: boolean } = {}): { cancel(): void } {
    const target = this.elapsed() + ms;
    let timer: Handle | number | undefined;
    const arm = (wait: number) => {
      timer = this.timers.setTimeout(() => {
        const missing = target - this.elapsed();
        if (missing > 0) arm(missing);
        else {
          timer = undefined;
          fn();
        }
      }, Math.max(0, wait));
      if (unref) (timer as { unref?: () => void }).unref?.();
    };
    arm(ms);
    return {
      cancel: () => {
        if (timer !== undefined) this.timers.clearTimeout(timer);
        timer = undefined;
      },
    };
  }

  private tick(): void {
    const at = this.now();
    const gap = Math.max(0, at - this.last);
    this.last = at;
    this.running += gap <= this.maxGapMs ? gap : this.tickMs;
  }
}

/**
 * A one-shot timer on running time, with a clock of its own that stops when it fires or is
 * cancelled: `fn` runs once `ms` of running time has passed. `unref`: it does not keep the
 * process alive (as an unref'd setTimeout).
 */
export function runningTimeout(ms: number, fn: () => void, options: RunningClockOptions & { unref?: boolean } = {}): { cancel(): void } {
  const clock = new RunningClock(options);
  const timer = clock.after(
    ms,
    () => {
      clock.stop();
      fn();
    },
    { unref: options.unref },
  );
  return {
    cancel: () => {
      timer.cancel();
      clock.stop();
    },
  };
}

function globalTimers(): RunningTimers {
  return {
    setInterval: (fn, ms) => setInterval(fn, ms),
    clearInterval: (handle) => clearInterval(handle as Handle),
    setTimeout: (fn, ms) => setTimeout(fn, ms),
    clearTimeout: (handle) => clearTimeout(handle as Handle),
  };
}
