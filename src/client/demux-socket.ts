/**
 * The TCP socket under a client's `ws://` WebSocket, reading into one reused buffer (Node's
 * `onread`) instead of a fresh Buffer per read. Until the upgrade is done every read goes to
 * Node's HTTP parser (as a copy, through the socket's 'data' event); from then on through a
 * FrameDemux (frame-demux.ts): output messages straight to their receiver, every other frame
 * to `ws` (again through 'data', where `ws` listens).
 *
 * If bytes followed the upgrade response in the same read (`ws` then got them as the
 * upgrade's head, so the next read may begin inside a frame) the demux is not used: every
 * read goes to `ws`, as it would without this. A tether server sends nothing before the
 * client's first request.
 */
import { connect, type NetConnectOpts, type Socket } from 'node:net';
import { FrameDemux, type DemuxTarget } from './frame-demux.js';
import { netConnectOptions, passToWs, type WsConnectOptions } from '../util/ws-internals.js';

/**
 * One read buffer for every client socket: each read is consumed (copied) before the next.
 * 256 KiB: a read then holds several of a Codex server's 8-16 KiB output messages, which the
 * relay joins into one chunk (relay/output-batch.ts), and a stream takes fewer reads.
 */
const READ_BUFFER = Buffer.allocUnsafeSlow(256 * 1024);
const END_OF_HEADERS = Buffer.from('\r\n\r\n');

export type OutputReceiver = Omit<DemuxTarget, 'passOn'>;

export class DemuxSocket {
  private socket: Socket | null = null;
  private demux: FrameDemux | null = null;
  /** How much of "\r\n\r\n" the reads so far end with (4: the upgrade response is complete). */
  private headerMatch = 0;
  private bytesAfterHeaders = false;

  constructor(
    private readonly receiver: OutputReceiver,
    private readonly maxMessageBytes: number,
    /** Every read (for the keepalive: bytes arrived). */
    private readonly onRead: () => void,
  ) {}

  /** For `ws`'s `createConnection` (what its own netConnect does, plus `onread`). */
  readonly connect = (options: WsConnectOptions): Socket => {
    const socket = connect({
      ...netConnectOptions(options),
      onread: {
        buffer: READ_BUFFER,
        callback: (bytes: number, buffer: Uint8Array) => {
          this.read(Buffer.from(buffer.buffer, buffer.byteOffset, bytes));
          return true;
        },
      },
    } as NetConnectOpts);
    this.socket = socket;
    return socket;
  };

  /** The WebSocket is open: frames from the next read on go through the demux. */
  start(): void {
    const socket = this.socket;
    if (!socket || this.bytesAfterHeaders) return;
    this.demux = new FrameDemux({ ...this.receiver, passOn: (bytes) => passToWs(socket, bytes) }, this.maxMessageBytes);
  }

  private read(view: Buffer): void {
    this.onRead();
    if (this.demux) return this.demux.push(view);
    if (this.headerMatch < END_OF_HEADERS.length) this.scanHeaders(view);
    // To Node's HTTP parser until the upgrade, then to `ws` (when the demux is not used).
    if (this.socket) passToWs(this.socket, Buffer.from(view));
  }

  private scanHeaders(view: Buffer): void {
    for (let i = 0; i < view.length; i++) {
      const byte = view[i]!;
      if (byte === END_OF_HEADERS[this.headerMatch]) this.headerMatch++;
      else this.headerMatch = byte === END_OF_HEADERS[0] ? 1 : 0;
      if (this.headerMatch === END_OF_HEADERS.length) {
        this.bytesAfterHeaders = i + 1 < view.length;
        return;
      }
    }
  }
}
