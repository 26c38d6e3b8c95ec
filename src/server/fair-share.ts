/**
 * Fair shares of the memory budget's output (issue 22): which sessions' children stop being
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
 * test/fair-share.test.ts.
 */
import type { MemoryBudget } from './memory-budget.js';
import { formatBytes } from '../util/format.js';

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
  private held = 0;
  private _hold: HoldReason | null = null;
  private closed = false;

  constructor(
    private readonly shares: OutputShares,
    readonly owner: string,
    /** Called when `hold` changes (the session re-decides its children's reading). */
    private readonly onChange: () => void,
  ) {}

  get heldBytes(): number {
    return this.held;
  }

  /** Why its children are held back now; null while they may be read. */
  get hold(): HoldReason | null {
    return this._hold;
  }

  /** Its fair share of the output pool now (counting itself as holding). */
  get shareBytes(): number {
    return this.shares.shareOf(this.owner, this.held === 0);
  }

  /** What `session/list` shows: why it is paused, in a sentence; null while it is not. */
  get holdText(): string | null {
    return this._hold ? holdText(this._hold, this.held, this.shareBytes) : null;
  }

  add(delta: number): void {
    if (this.closed || delta === 0) return;
    const before = this.held;
    this.held = Math.max(0, before + delta);
    if ((before === 0) !== (this.held === 0)) this.shares.holdingChanged(this.owner, this.held > 0);
    else this.refresh();
  }

  /** The session ended: its bytes and its place in the shares go. */
  close(): void {
    if (this.closed) return;
    this.add(-this.held);
    this.closed = true;
    this._hold = null;
    this.shares.unregister(this);
  }

  /** @internal Re-decides; tells the session when the decision changed. */
  refresh(): void {
    if (this.closed) return;
    const hold = this.shares.decide(this);
    if (hold === this._hold) return;
    if (hold !== null) this.shares.counters[hold]++;
    this._hold = hold;
    this.onChange();
  }
}

export class OutputShares {
  /** Sessions registered, by owner (what `--max-sessions-per-token` counts). */
  private readonly sessions = new Map<string, Set<SessionShare>>();
  /** Sessions holding output, by owner. */
  private readonly holding = new Map<string, number>();
  readonly counters: HoldCounters = { overShare: 0, budgetFull: 0 };
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
