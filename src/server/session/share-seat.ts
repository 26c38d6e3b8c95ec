/**
 * A session's seat in the memory budget's fair shares (memory/fair-share.ts): what its output
 * and its connection hold counts in its share, its children pause when it is over it, and
 * answers that would take it further are refused. Without shares (no budget) it holds nothing
 * back: the budget's pressure alone decides.
 */
import { shareOwner, type OutputShares, type SessionShare } from '../memory/index.js';
import type { ManagedProcess } from '../output/index.js';

export class ShareSeat {
  /** Its fair share of the memory budget's output; null: the budget's pressure alone decides. */
  private share: SessionShare | null = null;
  private reflowing = false;

  constructor(
    /** sha256 of the token that created the session: sessions of one token share one owner's part. */
    private readonly credential: Buffer,
    /** The session's processes: they re-decide whether to read their child when the decision changes. */
    private readonly processes: ReadonlyMap<string, ManagedProcess>,
  ) {}

  /** Takes its place in `shares` (as its owner's session), once. */
  join(shares: OutputShares): void {
    if (this.share) return;
    this.share = shares.register(shareOwner(this.credential), () => this.reflow());
  }

  /** Its fair-share decision changed: every process re-decides whether to read its child. */
  private reflow(): void {
    if (this.reflowing) return;
    this.reflowing = true;
    try {
      // A process reporting its bytes may change the decision again: until it settles (bounded).
      for (let round = 0; round < 4; round++) {
        const hold = this.share?.hold ?? null;
        for (const proc of this.processes.values()) proc.updateFlow();
        if ((this.share?.hold ?? null) === hold) break;
      }
    } finally {
      this.reflowing = false;
    }
  }

  /** Why the budget holds its children back now, as `session/list` shows it; null while it does not. */
  get holdText(): string | null {
    return this.share?.holdText ?? null;
  }

  /** Whether the budget holds its children back now; undefined without shares. */
  get heldBack(): boolean | undefined {
    return this.share ? this.share.hold !== null : undefined;
  }

  /** The output its processes hold changed by `delta` bytes. */
  outputChanged(delta: number): void {
    this.share?.add(delta);
  }

  /** What its connection holds besides output changed by `delta` bytes. */
  otherChanged(delta: number): void {
    this.share?.addOther(delta);
  }

  /** Its fair share now, bytes (Infinity without shares). */
  get shareBytes(): number {
    return this.share?.shareBytes ?? Number.POSITIVE_INFINITY;
  }

  /** Held back for holding its fair share or more (not merely because the budget is full). */
  get overShare(): boolean {
    return this.share?.hold === 'overShare';
  }

  /** Why an answer of about `bytes` is refused now, or null. */
  answerRefusal(bytes: number): string | null {
    return this.share?.answerRefusal(bytes) ?? null;
  }

  /** Resolves once the budget no longer holds it back (at once when it does not). */
  whenUnheld(): Promise<void> {
    return this.share?.whenUnheld() ?? Promise.resolve();
  }

  /** The session ended: it leaves the shares. */
  close(): void {
    this.share?.close();
  }
}
