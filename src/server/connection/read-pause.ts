/**
 * Why a connection's socket is not read now: several reasons may hold it paused at once (too
 * many requests waiting, file reads waiting, a message held to the memory budget), and it is
 * read again only once none is left. Nothing happens once the connection is closed.
 */

/** What is paused: the WebSocket (which pauses its socket). */
export interface Pausable {
  pause(): void;
  resume(): void;
}

export class ReadPause {
  private readonly reasons = new Set<string>();

  constructor(
    private readonly socket: Pausable,
    private readonly closed: () => boolean,
  ) {}

  /** Stops reading for `reason`. */
  pause(reason: string): void {
    if (this.closed()) return;
    if (this.reasons.size === 0) this.socket.pause();
    this.reasons.add(reason);
  }

  /** `reason` no longer holds it paused; it is read again once no reason is left. */
  resume(reason: string): void {
    if (!this.reasons.delete(reason) || this.closed()) return;
    if (this.reasons.size === 0) this.socket.resume();
  }
}
