/**
 * For a server whose socket leaves Nagle's algorithm on (the Codex exec-server sets no
 * TCP_NODELAY): such a server holds a small message back while an earlier one is
 * unacknowledged, and our kernel delays that TCP ACK (40 ms on Linux, longer elsewhere) while
 * we have nothing to send. A `process/write` answer and the output it caused then arrived
 * about 44 ms apart, on every write that followed another.
 *
 * So after a read from such a server, unless we sent something since (which carried the ACK),
 * one tiny frame goes back in the same turn of the event loop: an unsolicited pong (RFC 6455
 * 5.5.3: a unidirectional heartbeat, which no peer answers). At most one per turn, however
 * many messages that turn read.
 *
 * Except while output streams in: a pong per turn is a write syscall per socket read (a fifth
 * of the relay's CPU in front of a Codex server). A turn that read at least `BULK_BYTES` within
 * `SPACING_MS` of the last pong gets its pong `SPACING_MS` after that one instead (one timer, if
 * nothing was sent meanwhile): the ACK a message after a bulk read may wait for comes within
 * `SPACING_MS`, never the 40 ms delayed ACK, and an answer or a line (a small read) is
 * acknowledged in its turn as before. Pure bookkeeping around an injected `sendAck`,
 * scheduler, timer and clock.
 */
import { performance } from 'node:perf_hooks';

/** A turn that read this much is output streaming in. */
export const BULK_BYTES = 4096;
/** While output streams in, at most one pong per this many ms. */
export const SPACING_MS = 1;

export class PromptAck {
  /** Off until the server is known to need it (session-link.ts: one that accepted no tether extension). */
  enabled = false;
  private owed = false;
  private scheduled = false;
  /** Bytes read in this turn. */
  private turnBytes = 0;
  private lastAckAt = Number.NEGATIVE_INFINITY;
  private timerArmed = false;

  constructor(
    private readonly sendAck: () => void,
    private readonly schedule: (callback: () => void) => void = setImmediate,
    private readonly later: (callback: () => void, ms: number) => void = (callback, ms) => void setTimeout(callback, ms).unref(),
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** `bytes` arrived from the server (unknown: taken as a small read, acknowledged in its turn). */
  read(bytes = 0): void {
    if (!this.enabled) return;
    this.owed = true;
    this.turnBytes += bytes;
    if (this.scheduled) return;
    this.scheduled = true;
    this.schedule(this.endOfTurn);
  }

  /** Something went to the server: its ACK went with it. */
  sent(): void {
    this.owed = false;
  }

  private readonly endOfTurn = (): void => {
    this.scheduled = false;
    const bytes = this.turnBytes;
    this.turnBytes = 0;
    if (!this.owed) return;
    const wait = this.lastAckAt + SPACING_MS - this.now();
    if (bytes < BULK_BYTES || wait <= 0) {
      this.ack();
      return;
    }
    if (this.timerArmed) return;
    this.timerArmed = true;
    this.later(() => {
      this.timerArmed = false;
      if (this.owed) this.ack();
    }, wait);
  };

  private ack(): void {
    this.owed = false;
    this.lastAckAt = this.now();
    this.sendAck();
  }
}
