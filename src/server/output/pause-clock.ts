/**
 * Whether a child's output is read, and how long it has not been, in all (metrics). The
 * clock is injected (performance.now by default). Pure.
 */
import { performance } from 'node:perf_hooks';

export class PauseClock {
  /** A child's output streams start paused (spawn.ts). */
  private readingNow = false;
  private pausedSince: number;
  private pausedTotalMs = 0;

  constructor(private readonly now: () => number = () => performance.now()) {
    this.pausedSince = now();
  }

  get reading(): boolean {
    return this.readingNow;
  }

  /** Records the decision; false if it did not change. */
  set(read: boolean): boolean {
    if (read === this.readingNow) return false;
    this.readingNow = read;
    if (!read) this.pausedSince = this.now();
    else this.pausedTotalMs += this.now() - this.pausedSince;
    return true;
  }

  /** How long the output has not been read, in all, in ms. */
  get pausedMs(): number {
    return this.pausedTotalMs + (this.readingNow ? 0 : this.now() - this.pausedSince);
  }
}
