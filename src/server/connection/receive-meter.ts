/**
 * Messages still being received. `ReceiveMeter`: what a connection holds of them, the bytes read from its socket
 * since its last complete message. `ws` keeps a message's frames until the whole message has
 * arrived (up to `--max-message-size`), and says nothing of them until then; counted here,
 * they are in the memory budget and in the session's fair share like everything else a
 * client can make the server hold.
 *
 * The count is taken on the raw socket (ours: the upgrade hands it to `ws`), after `ws`'s own
 * `data` listener has run on the same chunk: a chunk that completes a message resets the count
 * (`messageDone`) before it is added, so the count errs by at most one socket read (64 KiB).
 */
import type { Socket } from 'node:net';
import { formatBytes } from '../../util/format.js';
import { afterWsReads } from '../../util/ws-internals.js';
import type { MemoryBudget } from '../memory/index.js';

export class ReceiveMeter {
  private bytes = 0;

  constructor(
    socket: Socket,
    /** Called with the bytes held now, whenever they change. */
    private readonly onChange: (bytes: number) => void,
  ) {
    afterWsReads(socket, (chunk) => this.set(this.bytes + chunk.length));
  }

  /** Bytes of messages being received now (at most one socket read more than the truth). */
  get held(): number {
    return this.bytes;
  }

  /** A message (or a control frame) arrived whole: what it held is the parser's no longer. */
  messageDone(): void {
    this.set(0);
  }

  private set(bytes: number): void {
    if (bytes === this.bytes) return;
    this.bytes = bytes;
    this.onChange(bytes);
  }
}

/** What `ReceiveGuard` needs of the connection's session (a `Session`): its fair share. */
export interface ReceivingSession {
  /** The budget holds it back for holding its fair share or more. */
  readonly overShare: boolean;
  /** Its fair share of the memory budget now, bytes. */
  readonly shareBytes: number;
  /** Resolves once the memory budget no longer holds it back. */
  whenUnheld(): Promise<void>;
}

/** What `ReceiveGuard` needs of its connection. */
export interface ReceivingLink {
  readonly closed: boolean;
  readonly session: ReceivingSession | null;
  readonly whenClosed: Promise<void>;
  pause(): void;
  resume(): void;
  /** Closes the connection with 1013 (try again later) and this reason. */
  close(reason: string): void;
}

/**
 * Holds messages being received to the memory budget: while the budget is pressed, a
 * connection stops being read once the message it is receiving outgrows its session's whole
 * share (or it has no session yet), until that is no longer so; if that lasts `stallMs`, it
 * is closed (1013). A message frees memory only once it has arrived (then a large one is
 * refused with the budget's reason, or handled), so one that fits its share is let in.
 */
export class ReceiveGuard {
  private waiting = false;
  private stallTimer: NodeJS.Timeout | null = null;

  constructor(
    private readonly meter: ReceiveMeter,
    private readonly budget: MemoryBudget | null,
    private readonly link: ReceivingLink,
    private readonly stallMs: number,
  ) {}

  /** The message being received grew: stop reading it if it is past its session's share. */
  check(): void {
    if (!this.waiting && this.heldBack()) void this.wait();
  }

  /** The connection is gone. */
  dispose(): void {
    if (this.stallTimer) clearTimeout(this.stallTimer);
    this.stallTimer = null;
  }

  private heldBack(): boolean {
    if (!this.budget?.pressured) return false;
    const session = this.link.session;
    return session ? session.overShare && this.meter.held > session.shareBytes : true;
  }

  private async wait(): Promise<void> {
    this.waiting = true;
    this.link.pause();
    this.stallTimer = setTimeout(() => {
      this.link.close(
        `the server's memory budget is pressed and this connection's session is over its fair share: ` +
          `a message of ${formatBytes(this.meter.held)} was left unread for ${Math.round(this.stallMs / 1000)} s; try again later`,
      );
    }, this.stallMs);
    this.stallTimer.unref?.();
    try {
      while (!this.link.closed && this.heldBack()) {
        const session = this.link.session;
        let unsubscribe = (): void => {};
        await Promise.race([
          session ? session.whenUnheld() : new Promise<void>((resolve) => (unsubscribe = this.budget!.onPressureChange(() => resolve()))),
          this.link.whenClosed,
        ]);
        unsubscribe();
      }
    } finally {
      this.dispose();
      this.waiting = false;
      this.link.resume();
    }
  }
}
