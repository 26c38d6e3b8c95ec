/**
 * What a connection holds of messages still being received: the bytes read from its socket
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

export class ReceiveMeter {
  private bytes = 0;

  constructor(
    socket: Socket,
    /** Called with the bytes held now, whenever they change. */
    private readonly onChange: (bytes: number) => void,
  ) {
    socket.on('data', (chunk: Buffer) => this.set(this.bytes + chunk.length));
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
