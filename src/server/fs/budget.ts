/**
 * A budget of bytes that requests may hold in memory at once (the server's fs data: file data
 * read for an answer, decoded data to write; a session's buffered `http/request` bodies). A
 * request that does not fit waits, first come first served; memory stays bounded by
 * configuration whatever clients ask for. What it has handed out is reported to the server's
 * memory budget.
 *
 * Shared fairly: each owner (a session) holds at most `perOwner` bytes at once, and a request
 * waiting only because its own owner is at its share never holds up other owners' requests,
 * so one session cannot take the whole budget while another's small read waits.
 */
import type { MemoryAccount } from '../memory/index.js';

interface Waiter {
  bytes: number;
  owner: object | undefined;
  grant: () => void;
}

export class ByteBudget {
  private available: number;
  private readonly waiters: Waiter[] = [];
  private readonly held = new Map<object, number>();
  /** Bytes one owner may hold at once. */
  readonly perOwner: number;

  constructor(
    readonly total: number,
    /** Where the bytes in use are counted (the server's memory budget), if anywhere. */
    private readonly account?: MemoryAccount,
    /** Bytes one owner may hold at once (default: the total). */
    perOwner = total,
  ) {
    this.available = total;
    this.perOwner = Math.max(1, Math.min(total, perOwner));
  }

  /**
   * Waits until `bytes` (at most the owner's share) fit, takes them, and returns the function
   * that gives them back. `owner`: whose share they come from (none: only the total counts).
   */
  async acquire(bytes: number, signal?: AbortSignal, owner?: object): Promise<() => void> {
    const want = Math.min(Math.max(0, bytes), owner ? this.perOwner : this.total);
    if (this.fits(want, owner) && !this.waiters.some((w) => w.owner === owner || this.ownerFits(w.bytes, w.owner))) {
      this.take(want, owner);
      return this.releaser(want, owner);
    }
    await new Promise<void>((resolve, reject) => {
      const waiter: Waiter = { bytes: want, owner, grant: resolve };
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
    return this.releaser(want, owner);
  }

  /** Bytes `owner` holds now. */
  heldBy(owner: object): number {
    return this.held.get(owner) ?? 0;
  }

  private ownerFits(bytes: number, owner: object | undefined): boolean {
    return owner === undefined || this.heldBy(owner) + bytes <= this.perOwner;
  }

  private fits(bytes: number, owner: object | undefined): boolean {
    return bytes <= this.available && this.ownerFits(bytes, owner);
  }

  private take(bytes: number, owner: object | undefined): void {
    this.available -= bytes;
    if (owner) this.held.set(owner, this.heldBy(owner) + bytes);
    this.account?.set(this.inUse);
  }

  get inUse(): number {
    return this.total - this.available;
  }

  private releaser(bytes: number, owner: object | undefined): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.available += bytes;
      if (owner) {
        const left = this.heldBy(owner) - bytes;
        if (left > 0) this.held.set(owner, left);
        else this.held.delete(owner);
      }
      this.account?.set(this.inUse);
      this.grantWaiting();
    };
  }

  /**
   * In order of arrival: a waiter at its owner's share is passed over (it waits for its own
   * owner's bytes, not for the others'); the first one that does not fit the total stops the
   * round, so a large request is not overtaken forever by small ones. An owner's own requests
   * stay in their order.
   */
  private grantWaiting(): void {
    const passed = new Set<object | undefined>();
    for (let i = 0; i < this.waiters.length; ) {
      const waiter = this.waiters[i]!;
      if (passed.has(waiter.owner) || !this.ownerFits(waiter.bytes, waiter.owner)) {
        passed.add(waiter.owner);
        i++;
        continue;
      }
      if (waiter.bytes > this.available) return;
      this.waiters.splice(i, 1);
      this.take(waiter.bytes, waiter.owner);
      waiter.grant();
    }
  }
}
