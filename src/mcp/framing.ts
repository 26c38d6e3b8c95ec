/**
 * Newline-delimited JSON-RPC framing, as the MCP stdio transport defines it: one JSON
 * message per line, `\n` terminated, an optional `\r` before it tolerated.
 *
 * The SDK's own `ReadBuffer` has the same rules but concatenates the whole buffer and
 * rescans it from the start on every chunk, which is quadratic for a large message that
 * arrives in many small chunks, and remote output arrives in exactly that shape (one chunk
 * per `process/output` notification). This framer keeps the pending chunks in a list and
 * only scans bytes it has not scanned before, so a line costs O(its length).
 * Messages are validated with the SDK's own schema (`deserializeMessage`), so what reaches
 * `onmessage` is exactly what the SDK's stdio transport would deliver.
 */
import { deserializeMessage, serializeMessage, STDIO_DEFAULT_MAX_BUFFER_SIZE } from '@modelcontextprotocol/sdk/shared/stdio.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';

export { serializeMessage };

const NEWLINE = 0x0a;
const CR = 0x0d;

/** A line longer than the framer's limit: the stream cannot be resynchronised safely. */
export class MessageTooLargeError extends Error {
  override readonly name = 'MessageTooLargeError';
  constructor(readonly limit: number) {
    super(`a JSON-RPC message exceeded the maximum size of ${limit} bytes`);
  }
}

/** Splits a byte stream into lines without ever rescanning bytes it already scanned. */
export class LineSplitter {
  private pending: Buffer[] = [];
  private pendingBytes = 0;

  constructor(private readonly maxLineBytes: number = STDIO_DEFAULT_MAX_BUFFER_SIZE) {}

  /**
   * Feeds a chunk; returns the complete lines it finished (without `\n` or a trailing `\r`),
   * decoded as UTF-8. A multi-byte character split across chunks is decoded whole, because
   * lines are decoded only once complete. Throws MessageTooLargeError (and drops what it
   * held) when an unterminated line grows past the limit.
   */
  push(chunk: Buffer): string[] {
    const lines: string[] = [];
    let start = 0;
    let nl = chunk.indexOf(NEWLINE, start);
    while (nl !== -1) {
      const tail = chunk.subarray(start, nl);
      let line: Buffer;
      if (this.pending.length === 0) {
        line = tail;
      } else {
        this.pending.push(tail);
        line = Buffer.concat(this.pending, this.pendingBytes + tail.length);
        this.pending = [];
        this.pendingBytes = 0;
      }
      if (line.length > this.maxLineBytes) throw new MessageTooLargeError(this.maxLineBytes);
      const end = line.length > 0 && line[line.length - 1] === CR ? line.length - 1 : line.length;
      lines.push(line.toString('utf8', 0, end));
      start = nl + 1;
      nl = chunk.indexOf(NEWLINE, start);
    }
    if (start < chunk.length) {
      const rest = chunk.subarray(start);
      if (this.pendingBytes + rest.length > this.maxLineBytes) {
        this.clear();
        throw new MessageTooLargeError(this.maxLineBytes);
      }
      this.pending.push(rest);
      this.pendingBytes += rest.length;
    }
    return lines;
  }

  /** Bytes of an unfinished line held back. */
  get bufferedBytes(): number {
    return this.pendingBytes;
  }

  clear(): void {
    this.pending = [];
    this.pendingBytes = 0;
  }
}

export type DecodeResult = { ok: true; message: JSONRPCMessage } | { ok: false; error: Error; line: string };

/**
 * Bytes in, JSON-RPC messages out. Blank lines are skipped (a stray `\r\n` from a server
 * is not an error); a line that is not a valid JSON-RPC message is reported per line and
 * does not stop the stream, as in the SDK's transport.
 */
export class JsonRpcLineDecoder {
  private readonly splitter: LineSplitter;

  constructor(maxMessageBytes?: number) {
    this.splitter = new LineSplitter(maxMessageBytes);
  }

  push(chunk: Buffer): DecodeResult[] {
    const out: DecodeResult[] = [];
    for (const line of this.splitter.push(chunk)) {
      if (line.trim() === '') continue;
      try {
        out.push({ ok: true, message: deserializeMessage(line) });
      } catch (error) {
        out.push({ ok: false, error: invalidLine(error, line), line });
      }
    }
    return out;
  }

  get bufferedBytes(): number {
    return this.splitter.bufferedBytes;
  }

  clear(): void {
    this.splitter.clear();
  }
}

/**
 * The server wrote a stdout line that is not a JSON-RPC message (reported, not fatal). Its
 * `name` stays 'Error' (as before the class existed): only instanceof and `line` are new.
 */
export class InvalidLineError extends Error {
  constructor(
    /** The line as shown (cut at 200 characters). */
    readonly line: string,
    readonly reason: 'not JSON' | 'not a JSON-RPC message',
    options?: { cause?: unknown },
  ) {
    super(`MCP server wrote a line that is ${reason}: ${line}`, options);
  }
}

function invalidLine(error: unknown, line: string): Error {
  const shown = line.length > 200 ? `${line.slice(0, 200)}…` : line;
  return new InvalidLineError(shown, error instanceof SyntaxError ? 'not JSON' : 'not a JSON-RPC message', { cause: error });
}
