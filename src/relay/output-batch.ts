/**
 * Joins the small output messages of one upstream socket read into one chunk for the relay's
 * log (relay throughput). A Codex exec-server sends its output in messages of 8-16
 * KiB; passed on one by one, each became a log chunk and a downstream frame of its own (a
 * JSON frame, a base64 encoding, a socket write each). Joined, a socket read's worth of
 * messages is one chunk of up to `BATCH_BYTES` (a Codex client's chunk limit, server/
 * output-chunks.ts), and tether's large binary messages still go through as they come.
 *
 * No allocation per message: the small ones are copied into a staging buffer taken from a
 * small shared pool and given back at each flush, and what `deliver` gets is a view that is
 * valid only during the call (the relay's log copies it, as it copies a local child's read).
 * So `add` keeps no reference to `data` once it returns: its memory may be reused at once.
 *
 * Order is kept: a batch holds one stream's bytes and is passed on before anything of the
 * other stream, once the next message would not fit, at the latest on the next
 * `process.nextTick` turn, and at once by `flush` (its owner calls it before passing on an
 * end, an exit or a close). No timer: a batch never waits for more output, only for the end
 * of the synchronous run that delivered it.
 */
import type { OutputStream } from '../protocol/index.js';

/** A joined chunk holds at most this much (a Codex client's largest chunk); a message this large goes as it is. */
export const BATCH_BYTES = 64 * 1024;

/** Staging buffers kept for reuse (each is in use only from a first small message to the next flush). */
const SPARE_STAGING = 4;
const spare: Buffer[] = [];

export class OutputBatch {
  private stream: OutputStream = 'stdout';
  private staging: Buffer | null = null;
  private bytes = 0;
  private scheduled = false;

  /** `deliver`'s `data` is valid only during the call. */
  constructor(private readonly deliver: (stream: OutputStream, data: Buffer) => void) {}

  /** Output of `stream`, in order (copied or passed on before this returns: `data` may be reused after). */
  add(stream: OutputStream, data: Buffer): void {
    if (this.bytes > 0 && (stream !== this.stream || this.bytes + data.length > BATCH_BYTES)) this.flush();
    if (data.length >= BATCH_BYTES) {
      this.deliver(stream, data);
      return;
    }
    if (data.length === 0) return;
    this.stream = stream;
    this.staging ??= spare.pop() ?? Buffer.allocUnsafe(BATCH_BYTES);
    data.copy(this.staging, this.bytes);
    this.bytes += data.length;
    if (!this.scheduled) {
      this.scheduled = true;
      process.nextTick(() => {
        this.scheduled = false;
        this.flush();
      });
    }
  }

  /** Passes on what is held now. */
  flush(): void {
    if (this.bytes === 0) return;
    const staging = this.staging!;
    const bytes = this.bytes;
    this.staging = null;
    this.bytes = 0;
    try {
      this.deliver(this.stream, staging.subarray(0, bytes));
    } finally {
      if (spare.length < SPARE_STAGING) spare.push(staging);
    }
  }
}
