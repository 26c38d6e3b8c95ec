/**
 * A server-wide budget of bytes that fs requests may hold in memory at once (file data read
 * for an answer, decoded data to write; buffered `http/request` bodies too). A request that
 * does not fit waits, first come first served; memory stays bounded by configuration whatever
 * clients ask for. What it has handed out is reported to the server's memory budget.
 */
import type { MemoryAccount } from '../memory-budget.js';

export class ByteBudget {
  private available: number;
  private readonly waiters: Array<{ bytes: number; grant: () => void }> = [];

  constructor(
    readonly total: number,
    /** Where the bytes in use are counted (the server's memory budget), if anywhere. */
    private readonly account?: MemoryAccount,
  ) {
    this.available = total;
  }

  /** Waits until `bytes` (at most the total) fit, takes them, and returns the function that gives them back. */
  async acquire(bytes: number, signal?: AbortSignal): Promise<() => void> {
    const want = Math.min(Math.max(0, bytes), this.total);
    if (this.waiters.length === 0 && want <= this.available) {
      this.take(want);
      return this.releaser(want);
    }
    await new Promise<void>((resolve, reject) => {
      const waiter = { bytes: want, grant: resolve };
      this.waiters.push(waiter);
      signal?.addEventListener(
        'abort',
        () => {
          const index = this.waiters.indexOf(waiter);
          if (index === -1) return; // already granted: the caller releases
          this.waiters.splice(index, 1);
          this.grantWaiting();
          reject(signal.reason);
        },
        { once: true },
      );
    });
    return this.releaser(want);
  }

  private take(bytes: number): void {
    this.available -= bytes;
    this.account?.set(this.inUse);
  }

  get inUse(): number {
    return this.total - this.available;
  }

  private releaser(bytes: number): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.available += bytes;
      this.account?.set(this.inUse);
      this.grantWaiting();
    };
  }

  private grantWaiting(): void {
    while (this.waiters.length > 0 && this.waiters[0]!.bytes <= this.available) {
      const waiter = this.waiters.shift()!;
      this.take(waiter.bytes);
      waiter.grant();
    }
  }
}
