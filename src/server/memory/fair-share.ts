/**
 * Fair shares of the memory budget's output: which sessions' children stop being
 * read when the budget is pressed, so one client that never acknowledges cannot freeze the
 * others' output.
 *
 * The policy (pure: `fairShareBytes`, `outputHold`):
 * - the output the budget keeps before its resume mark (80 %) is shared equally between the
 *   tokens whose sessions hold output, then equally between each token's holding sessions
 *   (opening more sessions buys a token no more share; `--max-sessions-per-token` caps them);
 * - while the budget is not pressured, nobody is held back by it;
 * - while it is pressured (from its 90 % mark until below 80 %), a session holding its share
 *   or more is paused (`overShare`): the hoarders stop first;
 * - a session under its share keeps being read — also past the pause mark — until the budget
 *   is full (100 %); then only up to its slice of the last tenth (`budgetFull` past that), so
 *   a small output (an `echo`) is still delivered while another client hoards, and what the
 *   server holds stays within the budget and its last tenth.
 *
 * `OutputShares` keeps the bookkeeping behind it (bytes per session, holding sessions per
 * token) and tells a session when its decision changes. No sockets, no timers:
 * test/unit/server/memory/fair-share.test.ts.
 */
import type { MemoryBudget } from './memory-budget.js';
import { formatBytes } from '../../util/format.js';

/** Which owner a credential (the digest of a token; empty with auth off) counts as in the shares. */
export function shareOwner(credential: Buffer): string {
  return credential.length > 0 ? credential.toString('hex') : 'none';
}

/** Why a session's children are not read because of the budget. */
export type HoldReason = 'overShare' | 'budgetFull';

export const HOLD_REASONS: readonly HoldReason[] = ['overShare', 'budgetFull'];

/** One session's slice of `poolBytes`: equal per holding token, then per holding session of its token. */
export function fairShareBytes(poolBytes: number, holdingOwners: number, holdingSessionsOfOwner: number): number {
  return Math.floor(Math.max(0, poolBytes) / Math.max(1, holdingOwners) / Math.max(1, holdingSessionsOfOwner));
}

export interface HoldInputs {
  /** The budget is past its pause mark (and not yet back below its resume mark). */
  pressured: boolean;
  /** The budget is spent (100 %). */
  full: boolean;
  /** Output the session holds (unacknowledged and kept for replay), bytes. */
  heldBytes: number;
  /** Its fair share of the output pool. */
  shareBytes: number;
  /** Its slice of the budget's last tenth: what it may still hold once the budget is full. */
  reserveBytes: number;
}

/** Whether (and why) a session's children are held back by the budget; null: read them. */
export function outputHold(i: HoldInputs): HoldReason | null {
  if (!i.pressured) return null;
  if (i.heldBytes >= i.shareBytes) return 'overShare';
  if (i.full && i.heldBytes >= i.reserveBytes) return 'budgetFull';
  return null;
}

/** The sentence `session/list` (and `tether ps`) shows for a held-back session. */
export function holdText(reason: HoldReason, heldBytes: number, shareBytes: number): string {
  return reason === 'overShare'
    ? `paused: over fair share (${formatBytes(heldBytes)} of ${formatBytes(shareBytes)})`
    : `paused: memory budget full (${formatBytes(heldBytes)} held)`;
}

/** Pauses that began, by reason (monotonic, for `/metrics`). */
export type HoldCounters = Record<HoldReason, number>;

/** A session's account in the shares: it reports its output bytes, and learns when its hold changes. */
export class SessionShare {
  /** Output held (what makes a session one of the holders the pool is split between). */
  private held = 0;
  /** Other bytes held for it: its connection's send buffer (answers it has not read). */
  private other = 0;
  private _hold: HoldReason | null = null;
  private closed = false;
  private unheldWaiters: (() => void)[] = [];

  constructor(
    private readonly shares: OutputShares,
    readonly owner: string,
    /** Called when `hold` changes (the session re-decides its children's reading). */
    private readonly onChange: () => void,
  ) {}

  /** Everything held for it: output, and answers queued for it that its client has not read. */
  get heldBytes(): number {
    return this.held + this.other;
  }

  /** Resolves once the budget no longer holds it back (at once when it does not, or when it closed). */
  whenUnheld(): Promise<void> {
    if (this._hold === null || this.closed) return Promise.resolve();
    return new Promise((resolve) => this.unheldWaiters.push(resolve));
  }

  /** Why its children are held back now; null while they may be read. */
  get hold(): HoldReason | null {
    return this._hold;
  }

  /** Its fair share of the output pool now (counting itself as holding). */
  get shareBytes(): number {
    return this.shares.shareOf(this.owner, !this.holding);
  }

  /**
   * One of the holders the pool is split between: it holds output, or at least
   * `SMALL_ANSWER_BYTES` of answers unread (smaller send buffers come and go with every frame;
   * counting them would re-decide every session on every frame).
   */
  private get holding(): boolean {
    return this.held > 0 || this.other >= SMALL_ANSWER_BYTES;
  }

  /** What `session/list` shows: why it is paused, in a sentence; null while it is not. */
  get holdText(): string | null {
    return this._hold ? holdText(this._hold, this.heldBytes, this.shareBytes) : null;
  }

  /**
   * Why an answer of about `bytes` is not built for it now, or null: while the budget is
   * pressed (or this answer would press it), an answer that would take the session past its share (at least
   * `SMALL_ANSWER_BYTES`, so a small read always passes) is refused with the budget's reason.
   * A client that asks for files it does not read gets refusals, not gigabytes queued for it.
   */
  answerRefusal(bytes: number): string | null {
    if (this.closed || !this.shares.pressedBy(bytes)) return null;
    const share = Math.max(this.shareBytes, SMALL_ANSWER_BYTES);
    if (this.heldBytes + bytes <= share) return null;
    this.shares.refusedAnswers++;
    return (
      `server memory budget pressed: an answer of about ${formatBytes(bytes)} would take this session past its fair share ` +
      `(${formatBytes(this.heldBytes)} held for it of ${formatBytes(share)}; --memory-budget); read the answers and output ` +
      `already sent, or ask again later`
    );
  }

  /**
   * Bytes its connection holds for it (requests in flight, its unread send buffer, a message
   * being received): they count in its decision, as output does, but make it one of the
   * holders the pool is split between only from `SMALL_ANSWER_BYTES` (a send buffer comes
   * and goes with every frame).
   */
  addOther(delta: number): void {
    this.change(() => (this.other = Math.max(0, this.other + delta)), delta);
  }

  /** Its output changed by `delta` bytes. */
  add(delta: number): void {
    this.change(() => (this.held = Math.max(0, this.held + delta)), delta);
  }

  /** Applies a change of its bytes; re-splits the pool when it starts or stops holding, else re-decides it alone. */
  private change(apply: () => void, delta: number): void {
    if (this.closed || delta === 0) return;
    const before = this.holding;
    apply();
    if (before !== this.holding) this.shares.holdingChanged(this.owner, this.holding);
    else this.refresh();
  }

  /** The session ended: its bytes and its place in the shares go. */
  close(): void {
    if (this.closed) return;
    this.add(-this.held);
    this.addOther(-this.other);
    this.closed = true;
    this._hold = null;
    this.shares.unregister(this);
    this.wakeUnheld();
  }

  private wakeUnheld(): void {
    const waiters = this.unheldWaiters;
    this.unheldWaiters = [];
    for (const wake of waiters) wake();
  }

  /** @internal Re-decides; tells the session when the decision changed. */
  refresh(): void {
    if (this.closed) return;
    const hold = this.shares.decide(this);
    if (hold === this._hold) return;
    if (hold !== null) this.shares.counters[hold]++;
    this._hold = hold;
    this.onChange();
    if (hold === null) this.wakeUnheld();
  }
}

/** An answer this small is never refused for being over a share (`answerRefusal`). */
export const SMALL_ANSWER_BYTES = 64 * 1024;

export class OutputShares {
  /** Sessions registered, by owner (what `--max-sessions-per-token` counts). */
  private readonly sessions = new Map<string, Set<SessionShare>>();
  /** Sessions holding output, by owner. */
  private readonly holding = new Map<string, number>();
  readonly counters: HoldCounters = { overShare: 0, budgetFull: 0 };
  /** Answers refused for not fitting their session's share (monotonic, for `/metrics`). */
  refusedAnswers = 0;
  private readonly poolBytes: number;
  private readonly reservePoolBytes: number;

  constructor(
    private readonly budget: MemoryBudget,
    marks: { pauseAt?: number; resumeBelow?: number } = {},
  ) {
    this.poolBytes = Math.floor(budget.limit * (marks.resumeBelow ?? 0.8));
    this.reservePoolBytes = Math.max(0, budget.limit - Math.floor(budget.limit * (marks.pauseAt ?? 0.9)));
    budget.onPressureChange(() => this.refreshAll());
    budget.onFullChange(() => this.refreshAll());
  }

  /** The budget is pressed (past its pause mark, not yet back below its resume mark). */
  get pressured(): boolean {
    return this.budget.pressured;
  }

  /** The budget is pressed, or `bytes` more would take it to its pause mark. */
  pressedBy(bytes: number): boolean {
    return this.budget.pressured || this.budget.used + bytes >= this.budget.pauseMark;
  }

  /** A new session of `owner` (a token's digest prefix). */
  register(owner: string, onChange: () => void): SessionShare {
    const share = new SessionShare(this, owner, onChange);
    let set = this.sessions.get(owner);
    if (!set) this.sessions.set(owner, (set = new Set()));
    set.add(share);
    return share;
  }

  /** Sessions `owner` has now. */
  sessionsOf(owner: string): number {
    return this.sessions.get(owner)?.size ?? 0;
  }

  /** Sessions paused by the budget now, by reason. */
  pausedNow(): HoldCounters {
    const now: HoldCounters = { overShare: 0, budgetFull: 0 };
    for (const set of this.sessions.values()) for (const s of set) if (s.hold) now[s.hold]++;
    return now;
  }

  /** @internal A session's share: `joining` counts it as holding even while it holds nothing yet. */
  shareOf(owner: string, joining: boolean): number {
    const ofOwner = this.holding.get(owner) ?? 0;
    const owners = this.holding.size + (joining && ofOwner === 0 ? 1 : 0);
    return fairShareBytes(this.poolBytes, owners, ofOwner + (joining ? 1 : 0));
  }

  /** @internal */
  decide(share: SessionShare): HoldReason | null {
    if (!this.budget.pressured) return null;
    const ofOwner = Math.max(1, this.holding.get(share.owner) ?? 0);
    const owners = Math.max(1, this.holding.size);
    return outputHold({
      pressured: true,
      full: this.budget.full,
      heldBytes: share.heldBytes,
      shareBytes: fairShareBytes(this.poolBytes, owners, ofOwner),
      reserveBytes: fairShareBytes(this.reservePoolBytes, owners, ofOwner),
    });
  }

  /** @internal A session started or stopped holding output: every share changes. */
  holdingChanged(owner: string, holds: boolean): void {
    const n = (this.holding.get(owner) ?? 0) + (holds ? 1 : -1);
    if (n > 0) this.holding.set(owner, n);
    else this.holding.delete(owner);
    // Unpressured, every hold is null already (a pressure change refreshes them all).
    if (this.budget.pressured) this.refreshAll();
  }

  /** @internal */
  unregister(share: SessionShare): void {
    const set = this.sessions.get(share.owner);
    set?.delete(share);
    if (set?.size === 0) this.sessions.delete(share.owner);
  }

  private refreshAll(): void {
    for (const set of [...this.sessions.values()]) for (const s of [...set]) s.refresh();
  }
}
