/**
 * The long polls of `process/read` (`waitMs`) on one process: each waits until its own test
 * of "something new" holds, its time is up, or its signal aborts (the asking connection
 * closed). The process calls `wake()` whenever its log moves. Timers only, no sockets.
 */
export class NewsWaiters {
  private readonly waiters = new Set<() => void>();

  /** Lets every waiter check its condition again (once each). */
  wake(): void {
    if (this.waiters.size === 0) return;
    const waiters = [...this.waiters];
    this.waiters.clear();
    for (const w of waiters) w();
  }

  /** Resolves once `hasNews()` holds (checked now and at each wake), after `waitMs`, or when `signal` aborts. */
  async wait(hasNews: () => boolean, waitMs: number, signal?: AbortSignal): Promise<void> {
    if (waitMs <= 0 || signal?.aborted || hasNews()) return;
    await new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.waiters.delete(check);
        signal?.removeEventListener('abort', done);
        resolve();
      };
      const check = () => {
        if (hasNews()) done();
        else this.waiters.add(check);
      };
      const timer = setTimeout(done, waitMs);
      signal?.addEventListener('abort', done, { once: true });
      this.waiters.add(check);
    });
  }

  get size(): number {
    return this.waiters.size;
  }
}
