/**
 * The supervisor's retry policy, pure: given how a connection attempt (or a live connection)
 * failed, either schedule the next attempt after a delay or stop with a status and a reason.
 * No timers, no sockets: the clock (for the crash window) and the random source (for the
 * backoff jitter) are injected, so it is tested with plain values.
 *
 * - auth: retrying with the same credentials cannot help → stop `requires_reauth`.
 * - refused: the server refuses every protocol version we speak; no retry can change that
 *   → stop `failed`, permanent (not even a call tries again; a manual retry or reload does).
 * - crash (stdio/exec server exited on its own): restart at once, until `crashLimit` crashes
 *   within `crashWindowMs` → stop `failed`.
 * - loss (link, network, HTTP server): exponential backoff with jitter, at most `maxRetries`
 *   retries per streak (undefined = unlimited) → stop `failed`.
 */
import { backoffDelay, type BackoffPolicy } from '../util/backoff.js';
import { CrashWindow } from './crash-window.js';

export type FailureKind = 'auth' | 'refused' | 'crash' | 'loss';

export type RetryDecision =
  | { action: 'schedule'; delayMs: number }
  | { action: 'stop'; status: 'failed' | 'requires_reauth'; reason: string; permanent?: boolean }
  /** Nothing to do: the server stays where it is (a call's probe of a failed server). */
  | { action: 'none' };

export interface RetryPolicyOptions {
  backoff: BackoffPolicy;
  maxRetries?: number;
  crashLimit: number;
  crashWindowMs: number;
}

export class RetryPolicy {
  private readonly crashes: CrashWindow;
  private streak = 0;

  constructor(
    private readonly options: RetryPolicyOptions,
    private readonly random: () => number = Math.random,
    now?: () => number,
  ) {
    this.crashes = new CrashWindow(options.crashLimit, options.crashWindowMs, now);
  }

  /** Failures in the current streak (the first connection, or the attempts after a loss). */
  get streakFailures(): number {
    return this.streak;
  }

  /** Retries made in the current streak: every failure but the first. */
  get retryCount(): number {
    return Math.max(0, this.streak - 1);
  }

  /** Crashes still inside the crash window. */
  get recentCrashes(): number {
    return this.crashes.count;
  }

  /** A new streak begins (connected, connection lost, or a fresh start). */
  newStreak(): void {
    this.streak = 0;
  }

  /** Manual retry: the crash window is forgotten too. */
  reset(): void {
    this.crashes.reset();
    this.streak = 0;
  }

  /**
   * One failure. `lastError` explains it (it ends the stop reasons). `staysFailed`: a
   * call-triggered attempt on a server already `failed` does not restart the retry loop.
   */
  onFailure(failure: FailureKind, lastError: string | null, staysFailed = false): RetryDecision {
    this.streak += 1;
    if (failure === 'auth') return { action: 'stop', status: 'requires_reauth', reason: `authorization failed: ${lastError}`, permanent: true };
    if (failure === 'refused') return { action: 'stop', status: 'failed', reason: `the server refuses the MCP protocol versions the gateway speaks: ${lastError}`, permanent: true };
    if (failure === 'crash') {
      const limitReached = this.crashes.record();
      if (staysFailed) return { action: 'none' }; // already failed and announced: a call's probe adds no event
      if (limitReached) {
        return { action: 'stop', status: 'failed', reason: `crashed ${this.crashes.count} times within ${Math.round(this.options.crashWindowMs / 1000)} s; last: ${lastError}` };
      }
      // A crash is restarted at once, not after a backoff.
      return { action: 'schedule', delayMs: 0 };
    }
    if (staysFailed) return { action: 'none' };
    const max = this.options.maxRetries;
    const retries = this.retryCount;
    if (max !== undefined && retries >= max) {
      return { action: 'stop', status: 'failed', reason: `gave up after ${retries} ${retries === 1 ? 'retry' : 'retries'}: ${lastError}` };
    }
    return { action: 'schedule', delayMs: backoffDelay(this.streak, this.options.backoff, this.random) };
  }
}
