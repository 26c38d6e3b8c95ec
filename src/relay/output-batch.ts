/**
 * Joins the small output messages of one upstream socket read into one chunk for the relay's
 * log (issue 25: relay throughput). A Codex exec-server sends its output in messages of 8-16
 * KiB; passed on one by one, each became a log chunk and a downstream frame of its own (a
 * JSON frame, a base64 encoding, a socket write each). Joined, a socket read's worth of
 * messages is one chunk of up to `BATCH_BYTES` (a Codex client's chunk limit, server/
 * output-chunks.ts), and tether's large binary messages still go through as they come.
 *
 * Order is kept: a batch holds one stream's bytes and is passed on before anything of the
 * other stream, once it is large enough, at the latest on the next `process.nextTick` turn,
 * and at once by `flush` (its owner calls it before passing on an end, an exit or a close).
 * No timer: a batch never waits for more output, only for the end of the synchronous run
 * that delivered it.
 */
import type { OutputStream } from '../protocol/index.js';

/** A batch is passed on once it holds this much (a Codex client's largest chunk). */
export const BATCH_BYTES = 64 * 1024;

export class OutputBatch {
  private stream: OutputStream = 'stdout';
  private parts: Buffer[] = [];
  private bytes = 0;
  private scheduled = false;

  constructor(private readonly deliver: (stream: OutputStream, data: Buffer) => void) {}

  /** Output of `stream`, in order (the batch keeps a reference: `data` must not be reused). */
  add(stream: OutputStream, data: Buffer): void {
    if (this.parts.length > 0 && stream !== this.stream) this.flush();
    if (this.parts.length === 0 && data.length >= BATCH_BYTES) {
      this.deliver(stream, data);
      return;
    }
    this.stream = stream;
    this.parts.push(data);
    this.bytes += data.length;
    if (this.bytes >= BATCH_BYTES) this.flush();
    else if (!this.scheduled) {
      this.scheduled = true;
      process.nextTick(() => {
        this.scheduled = false;
        this.flush();
      });
    }
  }

  /** Passes on what is held now. */
  flush(): void {
    if (this.parts.length === 0) return;
    const data = this.parts.length === 1 ? this.parts[0]! : Buffer.concat(this.parts, this.bytes);
    this.parts = [];
    this.bytes = 0;
    this.deliver(this.stream, data);
  }
}
