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
 * many messages that turn read. Pure bookkeeping around an injected `sendAck` and scheduler.
 */
export class PromptAck {
  /** Off until the server is known to need it (session-link.ts: one that accepted no tether extension). */
  enabled = false;
  private owed = false;
  private scheduled = false;

  constructor(
    private readonly sendAck: () => void,
    private readonly schedule: (callback: () => void) => void = setImmediate,
  ) {}

  /** Bytes arrived from the server. */
  read(): void {
    if (!this.enabled) return;
    this.owed = true;
    if (this.scheduled) return;
    this.scheduled = true;
    this.schedule(() => {
      this.scheduled = false;
      if (!this.owed) return;
      this.owed = false;
      this.sendAck();
    });
  }

  /** Something went to the server: its ACK went with it. */
  sent(): void {
    this.owed = false;
  }
}
