/**
 * One connection over a pair of byte streams (stdin and stdout), shaped like the part of a
 * server-side `ws` WebSocket that `Connection` uses, so a stdio client gets the very same
 * JSON-RPC handling, sessions and limits as a WebSocket client (stdio-listener.ts).
 *
 * The framing is stdio-lines.ts (one JSON message per line). Outgoing: each message is
 * written followed by `\n` (JSON never holds a raw newline). Nothing but those lines is
 * ever written to `output`. `bufferedAmount` is what `output` has not flushed yet, so the
 * send buffer's backpressure and the stall rule work as over a socket. A pipe has no
 * half-open state to detect: a ping is answered at once. The end of `input` (EOF), an error
 * on either stream, `close` or `terminate` all end the connection, once ('close').
 */
import { EventEmitter } from 'node:events';
import type { Readable, Writable } from 'node:stream';
import { StdioLines } from './stdio-lines.js';

const NEWLINE = Buffer.from('\n');

export interface StdioSocketEvents {
  message: [data: Buffer, isBinary: boolean];
  /** A line longer than the largest message (skipped, see stdio-lines.ts). */
  oversized: [bytes: number];
  ping: [];
  pong: [];
  error: [err: Error];
  close: [code: number, reason: Buffer];
}

export class StdioSocket extends EventEmitter<StdioSocketEvents> {
  readonly CONNECTING = 0;
  readonly OPEN = 1;
  readonly CLOSING = 2;
  readonly CLOSED = 3;
  readyState = 1;
  private readonly lines: StdioLines;
  private readonly onData = (chunk: Buffer): void => {
    for (const item of this.lines.push(chunk)) {
      if (this.readyState !== this.OPEN) return;
      if (item.kind === 'line') this.emit('message', item.line, false);
      else this.emit('oversized', item.bytes);
    }
  };
  private readonly onEnd = (): void => this.end(1000, 'end of input');
  private readonly onStreamError = (err: Error): void => {
    if (this.readyState !== this.OPEN) return;
    this.emit('error', err);
    this.end(1006, err.message);
  };

  constructor(
    private readonly input: Readable,
    private readonly output: Writable,
    maxMessageBytes: number,
  ) {
    super();
    this.lines = new StdioLines(maxMessageBytes);
    input.on('data', this.onData);
    input.on('end', this.onEnd);
    input.on('error', this.onStreamError);
    output.on('error', this.onStreamError);
  }

  /** Bytes written and not yet flushed by `output`. */
  get bufferedAmount(): number {
    return this.output.writableLength;
  }

  send(data: string | Buffer, options?: object | ((err?: Error) => void), callback?: (err?: Error) => void): void {
    const cb = typeof options === 'function' ? options : callback;
    if (this.readyState !== this.OPEN || this.output.destroyed) {
      if (cb) process.nextTick(cb, new Error('the stdio connection is closed'));
      return;
    }
    // Two writes in order, nothing between them: no copy of a large message to add one byte.
    this.output.write(data);
    this.output.write(NEWLINE, (err) => cb?.(err ?? undefined));
  }

  /** No ping goes over a pipe: the peer is there as long as the pipe is. Answered at once. */
  ping(_data?: unknown, _mask?: unknown, callback?: (err?: Error) => void): void {
    process.nextTick(() => {
      callback?.();
      if (this.readyState === this.OPEN) this.emit('pong');
    });
  }

  pause(): void {
    this.input.pause();
  }

  resume(): void {
    if (this.readyState === this.OPEN) this.input.resume();
  }

  close(code = 1000, reason = ''): void {
    this.end(code, reason);
  }

  terminate(): void {
    this.end(1006, '');
  }

  private end(code: number, reason: string): void {
    if (this.readyState !== this.OPEN) return;
    this.readyState = this.CLOSED;
    this.input.off('data', this.onData);
    this.input.off('end', this.onEnd);
    // Further errors on the streams (EPIPE once the peer is gone) are nobody's business now.
    this.input.off('error', this.onStreamError);
    this.output.off('error', this.onStreamError);
    this.input.on('error', () => {});
    this.output.on('error', () => {});
    this.input.pause();
    process.nextTick(() => this.emit('close', code, Buffer.from(reason)));
  }
}
