/**
 * A connection's places for requests whose answers can be megabytes (a file, a listing, a
 * config): at most `MAX_LARGE_ANSWERS` are handled at once (one while the memory budget is
 * pressed, so each is weighed against its session's share only once the one before it is in
 * the send buffer), and each only once the send buffer is below its mark. So what one client
 * can have queued for it unread is the mark plus that many answers.
 *
 * No sockets: the connection says whether it is closed, backpressured or pressed.
 */
const MAX_LARGE_ANSWERS = 2;

export interface AnswerLink {
  readonly closed: boolean;
  readonly backpressured: boolean;
  whenDrained(): Promise<void>;
}

export class AnswerPlaces {
  private running = 0;
  private waiters: Array<() => void> = [];

  constructor(
    private readonly link: AnswerLink,
    /** The memory budget is pressed now. */
    private readonly pressed: () => boolean,
  ) {}

  /** Waits for a place; false when the connection closed meanwhile (nothing taken). */
  async take(): Promise<boolean> {
    for (;;) {
      if (this.link.closed) return false;
      const places = this.pressed() ? 1 : MAX_LARGE_ANSWERS;
      if (this.running >= places) await new Promise<void>((resolve) => this.waiters.push(resolve));
      else if (this.link.backpressured) await this.link.whenDrained();
      else break;
    }
    this.running++;
    return true;
  }

  /** A place taken is free again (its answer was handed to the socket, or failed). */
  give(): void {
    this.running--;
    this.waiters.shift()?.();
  }

  /** The connection closed: every waiter gives up. */
  closeAll(): void {
    for (const wake of this.waiters.splice(0)) wake();
  }
}
