/**
 * What one process's output holds under the server's memory budget: its history (kept for
 * process/read, and whatever its blocks hold beyond the bytes) and its unacknowledged
 * output, each in its own account, and the change of their sum reported to its session
 * (whose fair share counts it). Without a budget, nothing is counted.
 */
import type { MemoryAccount, MemoryBudget } from '../memory/index.js';

/** The log's and the arena's sizes this is updated from. */
export interface HeldSizes {
  /** Acknowledged output kept for process/read. */
  historyBytes: number;
  /** Output sent or waiting to be sent that the client has not acknowledged. */
  unackedBytes: number;
  /** Bytes the arena's blocks take (the block being filled, blocks kept for reuse). */
  arenaHeldBytes: number;
}

export class HeldOutput {
  private readonly accounts: { budget: MemoryBudget; history: MemoryAccount; unacked: MemoryAccount } | null;
  /** What was last reported to the session as held (history + unacknowledged). */
  private reported = 0;

  constructor(
    budget: MemoryBudget | undefined,
    private readonly report: (delta: number) => void,
  ) {
    this.accounts = budget ? { budget, history: budget.account('output'), unacked: budget.account('unacked') } : null;
  }

  /** There is a budget to count against. */
  get budgeted(): boolean {
    return this.accounts !== null;
  }

  /** The budget is past its pause mark (false without a budget). */
  get pressured(): boolean {
    return this.accounts?.budget.pressured ?? false;
  }

  /** Counts what the process keeps now and reports the change to its session. */
  update(sizes: HeldSizes): void {
    if (!this.accounts) return;
    // What its blocks hold beyond the bytes themselves counts as history: the budget sees
    // the memory, not just the output.
    this.accounts.history.set(Math.max(sizes.historyBytes, sizes.arenaHeldBytes - sizes.unackedBytes));
    this.accounts.unacked.set(sizes.unackedBytes);
    this.reportHeld(this.accounts.history.bytes + this.accounts.unacked.bytes);
  }

  /** The process is released: its accounts close and the session hears it holds nothing. */
  close(): void {
    this.accounts?.history.close();
    this.accounts?.unacked.close();
    this.reportHeld(0);
  }

  private reportHeld(held: number): void {
    const delta = held - this.reported;
    if (delta === 0) return;
    this.reported = held;
    this.report(delta);
  }
}
