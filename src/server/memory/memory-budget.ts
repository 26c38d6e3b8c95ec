/**
 * The server-wide memory budget: one number of bytes (`--memory-budget`) over everything
 * clients and children can make the server hold. Every holder reports to it through its own
 * `MemoryAccount` — output kept for clients (acknowledged history and unacknowledged
 * windows), input queued for children's stdin, requests being handled, per-connection send
 * buffers, file data and HTTP bodies in flight — and the budget answers two questions:
 *
 * - `pressured`: producers should stop being read (set at 90 % of the budget, cleared below
 *   80 %, so a budget hovering at the mark does not flap every child's pipes);
 * - `refusal()`: at 100 %, why a new session or process is refused (null while it fits).
 *
 * Pure bookkeeping (no sockets, no timers): test/unit/server/memory/memory-budget.test.ts.
 */
import { formatBytes } from '../../util/format.js';

/** What holds the bytes (a label of `/metrics` and of the refusal text). */
export type MemoryHolder = 'output' | 'unacked' | 'input' | 'receiving' | 'send' | 'files' | 'http';

const HOLDER_TEXT: Record<MemoryHolder, string> = {
  output: 'output kept for replay',
  unacked: 'output clients have not acknowledged',
  input: 'requests and input queued for children',
  receiving: 'messages still being received',
  send: 'send buffers',
  files: 'file data',
  http: 'HTTP bodies',
};

export const MEMORY_HOLDERS = Object.keys(HOLDER_TEXT) as readonly MemoryHolder[];

export interface MemoryBudgetOptions {
  /** Fraction of the budget at which producers pause (0.9). */
  pauseAt?: number;
  /** Fraction below which they are read again (0.8). */
  resumeBelow?: number;
}

export class MemoryBudget {
  private readonly held: Record<MemoryHolder, number> = { output: 0, unacked: 0, input: 0, receiving: 0, send: 0, files: 0, http: 0 };
  private total = 0;
  private _pressured = false;
  private readonly pauseBytes: number;
  private readonly resumeBytes: number;
  private readonly listeners = new Set<(pressured: boolean) => void>();
  private readonly fullListeners = new Set<(full: boolean) => void>();

  constructor(
    /** The budget, in bytes. */
    readonly limit: number,
    options: MemoryBudgetOptions = {},
  ) {
    this.pauseBytes = Math.floor(limit * (options.pauseAt ?? 0.9));
    this.resumeBytes = Math.min(this.pauseBytes, Math.floor(limit * (options.resumeBelow ?? 0.8)));
  }

  /** A holder's own account: it reports its bytes there, and closes it when it goes. */
  account(holder: MemoryHolder): MemoryAccount {
    return new MemoryAccount(this, holder);
  }

  /** Bytes at which producers pause (`pressured` turns on). */
  get pauseMark(): number {
    return this.pauseBytes;
  }

  /** Bytes held now, all holders. */
  get used(): number {
    return this.total;
  }

  /** Bytes held now by one kind of holder. */
  heldBy(holder: MemoryHolder): number {
    return this.held[holder];
  }

  /** Producers should not be read (the budget reached its pause mark and has not fallen below the resume mark). */
  get pressured(): boolean {
    return this._pressured;
  }

  /** The budget is spent: sessions held back by it are refused new processes (`refusal`). */
  get full(): boolean {
    return this.total >= this.limit;
  }

  /** Called with the new state each time `pressured` changes. Returns the unsubscriber. */
  onPressureChange(listener: (pressured: boolean) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Called with the new state each time `full` changes. Returns the unsubscriber. */
  onFullChange(listener: (full: boolean) => void): () => void {
    this.fullListeners.add(listener);
    return () => this.fullListeners.delete(listener);
  }

  /**
   * Why a new `what` is refused now, naming the budget; null while the budget has room.
   * `withinShare`: the asker holds less than its fair share (a new session holds nothing):
   * another's hoarding never refuses it. What it may then make the server hold is bounded by
   * how its children are read (fair-share.ts: past the limit, only up to its slice of the
   * budget's last tenth), not by refusing it.
   */
  refusal(what: 'session' | 'process' | 'large request', withinShare = false): string | null {
    if (!this.full || withinShare) return null;
    const holders = MEMORY_HOLDERS.filter((h) => this.held[h] > 0)
      .sort((a, b) => this.held[b] - this.held[a])
      .map((h) => `${HOLDER_TEXT[h]} ${formatBytes(this.held[h])}`)
      .join(', ');
    return (
      `server memory budget exhausted: ${formatBytes(this.total)} held of the ${formatBytes(this.limit)} budget (--memory-budget)` +
      `${holders ? `: ${holders}` : ''}; no new ${what} until clients read their output or sessions end`
    );
  }

  /** @internal: MemoryAccount's way in. */
  change(holder: MemoryHolder, delta: number): void {
    if (delta === 0) return;
    const wasFull = this.full;
    this.held[holder] += delta;
    this.total += delta;
    if (!this._pressured && this.total >= this.pauseBytes) this.setPressured(true);
    else if (this._pressured && this.total < this.resumeBytes) this.setPressured(false);
    if (this.full !== wasFull) for (const listener of [...this.fullListeners]) listener(!wasFull);
  }

  private setPressured(pressured: boolean): void {
    this._pressured = pressured;
    for (const listener of [...this.listeners]) listener(pressured);
  }
}

/**
 * One holder's bytes in the budget. `set` reports a new total (the holder knows its size),
 * `add` a change; `close` gives everything back. Never below zero; after `close`, ignored.
 */
export class MemoryAccount {
  private held = 0;
  private closed = false;

  constructor(
    private readonly budget: MemoryBudget,
    readonly holder: MemoryHolder,
  ) {}

  get bytes(): number {
    return this.held;
  }

  set(bytes: number): void {
    if (this.closed) return;
    const next = Math.max(0, bytes);
    const delta = next - this.held;
    if (delta === 0) return;
    this.held = next;
    this.budget.change(this.holder, delta);
  }

  add(delta: number): void {
    this.set(this.held + delta);
  }

  close(): void {
    this.set(0);
    this.closed = true;
  }
}
