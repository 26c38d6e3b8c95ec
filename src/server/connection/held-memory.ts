/**
 * What one connection holds, counted where it must be: in the server's memory budget (its
 * requests in flight as `input`, its send buffer as `send`, messages it is still receiving as
 * `receiving`) and in its session's fair share (their sum, `report`). A session that changed
 * (initialize, close) is settled with: what was reported to the old one is taken back.
 *
 * No sockets: the connection says what it holds now and tells this when a part changed.
 */
import type { MemoryAccount, MemoryBudget } from '../memory/index.js';

/** What held-memory accounting needs of the connection's session (a `Session`): its fair share's count. */
export interface HeldSession {
  /** What its connection holds besides output changed by `delta` bytes. */
  connectionHeldChanged(delta: number): void;
}

/** What held-memory accounting needs of its connection. */
export interface HeldLink {
  readonly closed: boolean;
  readonly session: HeldSession | null;
}

export class HeldMemory {
  /** Where the bytes are counted (the server's memory budget), once the server gave one. */
  private accounts: { budget: MemoryBudget; requests: MemoryAccount; send: MemoryAccount; receiving: MemoryAccount } | null = null;
  /** What this connection holds for its session, as last told to that session's fair share. */
  private heldReported = 0;
  private reportedTo: HeldSession | null = null;

  constructor(
    private readonly link: HeldLink,
    /** Bytes held now: requests in flight, the send buffer, messages being received. */
    private readonly holds: () => number,
  ) {}

  /** Counts in `budget` from now on. */
  useBudget(budget: MemoryBudget): void {
    this.accounts = { budget, requests: budget.account('input'), send: budget.account('send'), receiving: budget.account('receiving') };
  }

  /** The server's memory budget, when one is used. */
  get budget(): MemoryBudget | null {
    return this.accounts?.budget ?? null;
  }

  /** Requests in flight hold `delta` bytes more (or fewer). */
  requestsChanged(delta: number): void {
    this.accounts?.requests.add(delta);
    this.report();
  }

  /** The send buffer holds `bytes` now. */
  sendChanged(bytes: number): void {
    this.accounts?.send.set(bytes);
    this.report();
  }

  /** Messages being received hold `bytes` now. */
  receivingChanged(bytes: number): void {
    this.accounts?.receiving.set(bytes);
    this.report();
  }

  /**
   * Tells the session's fair share what this connection holds for it now: requests in flight
   * (input queued for its children among them), answers and output its client has not read,
   * messages still being received. Nothing once the connection is closed.
   */
  report(): void {
    const session = this.link.session;
    if (this.reportedTo !== session) {
      this.reportedTo?.connectionHeldChanged(-this.heldReported);
      this.heldReported = 0;
      this.reportedTo = session;
    }
    const now = this.link.closed ? 0 : this.holds();
    const delta = now - this.heldReported;
    if (delta === 0) return;
    this.heldReported = now;
    session?.connectionHeldChanged(delta);
  }

  /** The socket is gone: what was queued died with it (requests in flight still hold their data until they settle). */
  sendClosed(): void {
    this.accounts?.send.close();
  }

  /** The socket is gone: nothing more is being received. */
  receivingClosed(): void {
    this.accounts?.receiving.close();
  }
}
