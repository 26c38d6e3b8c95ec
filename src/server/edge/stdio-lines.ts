/**
 * The framing of an exec-server on stdio (Codex 0.171's `exec-server --listen stdio`): one
 * JSON message per line, `\n` terminated, an optional `\r` before it tolerated, empty lines
 * ignored. Pure: bytes in, lines out.
 *
 * Memory is bounded by `maxLineBytes` (the server's largest message): a longer line is not
 * kept, and its bytes are skipped up to the next newline, where the stream is in step again
 * (a line cannot hide a newline: JSON escapes it). The caller answers it with one error and
 * carries on, as the server does with any other bad message. Only bytes not scanned before
 * are scanned, so a line costs O(its length) whatever the chunking.
 */
const NEWLINE = 0x0a;
const CR = 0x0d;

/** What a chunk finished: a whole line, or a line that was too long (its size so far). */
export type StdioLine = { kind: 'line'; line: Buffer } | { kind: 'too-large'; bytes: number };

export class StdioLines {
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  /** Skipping an oversized line up to its newline; the bytes skipped so far. */
  private skipping: number | null = null;

  constructor(private readonly maxLineBytes: number) {}

  /** Feeds a chunk; returns what it finished, in order. */
  push(chunk: Buffer): StdioLine[] {
    const out: StdioLine[] = [];
    let start = 0;
    for (let nl = chunk.indexOf(NEWLINE); nl !== -1; nl = chunk.indexOf(NEWLINE, start)) {
      const tail = chunk.subarray(start, nl);
      start = nl + 1;
      if (this.skipping !== null) {
        out.push({ kind: 'too-large', bytes: this.skipping + tail.length });
        this.skipping = null;
        continue;
      }
      const size = this.pendingBytes + tail.length;
      if (size > this.maxLineBytes) {
        this.clear();
        out.push({ kind: 'too-large', bytes: size });
        continue;
      }
      const line = this.pending.length === 0 ? tail : Buffer.concat([...this.pending, tail], size);
      this.clear();
      const end = line.length > 0 && line[line.length - 1] === CR ? line.length - 1 : line.length;
      if (end > 0) out.push({ kind: 'line', line: line.subarray(0, end) });
    }
    if (start < chunk.length) {
      const rest = chunk.subarray(start);
      if (this.skipping !== null) this.skipping += rest.length;
      else if (this.pendingBytes + rest.length > this.maxLineBytes) {
        this.skipping = this.pendingBytes + rest.length;
        this.clear();
      } else {
        // Copied: the caller's chunk may be reused (a stream's pooled buffer).
        this.pending.push(Buffer.from(rest));
        this.pendingBytes += rest.length;
      }
    }
    return out;
  }

  /** Bytes of an unfinished line held (never more than `maxLineBytes`). */
  get bufferedBytes(): number {
    return this.pendingBytes;
  }

  private clear(): void {
    this.pending = [];
    this.pendingBytes = 0;
  }
}
