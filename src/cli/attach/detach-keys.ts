/**
 * The detach escape of `tether attach` (as ssh's `~.`): a pure state machine over the bytes
 * typed on a local terminal. A `~` typed right after a newline (or as the very first key) is
 * held back; the key after it decides:
 * - `.` detaches: nothing from the `~` on is forwarded;
 * - `~` sends one literal `~`;
 * - anything else sends the held `~` and that key, as typed.
 * A `~` anywhere else on a line is forwarded at once. "Newline" is CR or LF (a terminal in raw
 * mode sends CR for Enter). Everything else is forwarded unchanged and in order.
 */

export interface DetachKeysResult {
  /** What to send to the remote process now. */
  forward: Buffer;
  /** `~.` was typed: detach (bytes after it are dropped). */
  detach: boolean;
}

const TILDE = 0x7e;
const DOT = 0x2e;
const CR = 0x0d;
const LF = 0x0a;

export class DetachKeys {
  /** The last byte forwarded ended a line (true at the start). */
  #lineStart = true;
  /** A `~` at a line start is held, waiting for the next key. */
  #tildeHeld = false;
  #detached = false;

  get detached(): boolean {
    return this.#detached;
  }

  /** Feeds typed bytes; returns what to forward, and whether `~.` was typed. */
  feed(input: Uint8Array): DetachKeysResult {
    if (this.#detached) return { forward: Buffer.alloc(0), detach: true };
    const out: number[] = [];
    for (const byte of input) {
      if (this.#tildeHeld) {
        this.#tildeHeld = false;
        if (byte === DOT) {
          this.#detached = true;
          return { forward: Buffer.from(out), detach: true };
        }
        out.push(TILDE);
        if (byte === TILDE) {
          // `~~`: one literal tilde; the line no longer starts here.
          this.#lineStart = false;
          continue;
        }
        out.push(byte);
        this.#lineStart = byte === CR || byte === LF;
        continue;
      }
      if (byte === TILDE && this.#lineStart) {
        this.#tildeHeld = true;
        continue;
      }
      out.push(byte);
      this.#lineStart = byte === CR || byte === LF;
    }
    return { forward: Buffer.from(out), detach: false };
  }

  /** Input ended (EOF): a held `~` is sent as typed. */
  flush(): Buffer {
    if (!this.#tildeHeld) return Buffer.alloc(0);
    this.#tildeHeld = false;
    this.#lineStart = false;
    return Buffer.from([TILDE]);
  }
}
