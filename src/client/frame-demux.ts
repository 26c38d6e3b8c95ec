/**
 * Takes tether's binary output messages (extension `binaryOutput`, protocol/binary-frames.ts)
 * off a WebSocket's incoming bytes before `ws` parses them, and passes every other frame on
 * to `ws` unchanged.
 *
 * Why: with `ws` parsing everything, each socket read is a fresh 64 KiB Buffer and output
 * waits in those Buffers until the local sink took it; the young generation fills with
 * survivors and V8 runs a mark-compact every ~25 MiB streamed (about a third of the client's
 * CPU). Here the socket reads into one reused buffer (Node's `onread`); output bytes are
 * copied where their receiver says (reused blocks for a sink that is done with them once
 * written, owned Buffers otherwise), and only the small rest — JSON, pings, closes — is
 * copied for `ws`.
 *
 * Server-to-client frames only (never masked). Anything this does not expect — a masked
 * frame, reserved bits, a continuation of nothing, an oversized message — turns it into a
 * plain pipe to `ws` for the rest of the connection, so `ws` sees the violation and closes
 * the connection as it would have anyway. Pure: no sockets (test/unit/client/frame-demux.test.ts).
 */
import { BINARY_HEADER_BYTES } from '../protocol/binary-frames.js';
import type { ByteArena } from '../util/byte-arena.js';

export interface DemuxTarget {
  /** Bytes of frames that are not tether output, in order (the receiver owns them). */
  passOn(bytes: Buffer): void;
  /**
   * Where the bytes of the output message with this 16-byte header go: an arena (the pieces
   * are then views into it, one reference each) or null (owned Buffers).
   */
  memoryFor(header: Buffer): ByteArena | null;
  /** One whole output message: its header and its bytes, in pieces (now the target's). */
  output(header: Buffer, pieces: Buffer[], memory: ByteArena | null): void;
}

/** A tether binary frame's first byte is below this (protocol/binary-frames.ts, isTetherBinaryFrame). */
const FIRST_JSON_BYTE = 0x09;
const OP_CONTINUATION = 0x0;
const OP_TEXT = 0x1;
const OP_BINARY = 0x2;

export class FrameDemux {
  /** Set once the stream stops making sense to this parser: everything goes to `ws`. */
  private passAll = false;
  // The frame header being read (at most 2 + 8 bytes: server frames carry no mask).
  private readonly frameHeader = Buffer.alloc(10);
  private frameHeaderBytes = 0;
  private inPayload = false;
  private fin = false;
  private remaining = 0;
  private frameIsOurs = false;
  private frameIsControl = false;
  /** A binary frame whose header is read: its first payload byte says whose message it is. */
  private deciding = false;
  /** The data message in progress: null (none), ours, or theirs (continuations follow it). */
  private messageOurs: boolean | null = null;
  // Our message in progress.
  private readonly outputHeader = Buffer.alloc(BINARY_HEADER_BYTES);
  private outputHeaderBytes = 0;
  private memory: ByteArena | null = null;
  private pieces: Buffer[] = [];
  private messageBytes = 0;

  constructor(
    private readonly target: DemuxTarget,
    private readonly maxMessageBytes: number,
  ) {}

  /** The next bytes from the socket (valid only during the call). */
  push(chunk: Buffer): void {
    if (this.passAll) return this.target.passOn(Buffer.from(chunk));
    let i = 0;
    // `ws`'s bytes go on in runs as long as possible (one copy, one 'data' per run): a run
    // starts at a frame of theirs and ends where one of ours begins, or with the read.
    let passFrom = this.inPayload && !this.frameIsOurs ? 0 : -1;
    const flush = (end: number) => {
      if (passFrom >= 0 && end > passFrom) this.target.passOn(Buffer.from(chunk.subarray(passFrom, end)));
      passFrom = -1;
    };
    while (i < chunk.length) {
      if (!this.inPayload) {
        // Where this frame's header starts in this read (-1: it began in an earlier one).
        const headerStart = this.frameHeaderBytes === 0 && !this.deciding ? i : -1;
        // Header bytes are collected apart: whose frame it is is known only once it is whole.
        while (i < chunk.length && this.frameHeaderBytes < this.headerLength()) this.frameHeader[this.frameHeaderBytes++] = chunk[i++]!;
        const before = headerStart >= 0 ? headerStart : i;
        if (this.frameHeaderBytes < this.headerLength()) {
          flush(before);
          return;
        }
        if (this.deciding || this.startFrame()) {
          // A binary message: ours if it starts below any JSON byte (isTetherBinaryFrame's rule).
          if (i >= chunk.length) {
            this.deciding = true;
            flush(before);
            return;
          }
          this.deciding = false;
          this.frameIsOurs = this.messageOurs = chunk[i]! < FIRST_JSON_BYTE;
          if (this.frameIsOurs) this.beginOutput();
        }
        if (this.passAll) {
          flush(before);
          if (headerStart < 0) this.target.passOn(Buffer.from(this.frameHeader.subarray(0, this.frameHeaderBytes)));
          this.target.passOn(Buffer.from(chunk.subarray(before)));
          return;
        }
        if (this.frameIsOurs) {
          flush(before); // our frame's header is not for ws
        } else if (passFrom < 0) {
          if (headerStart >= 0) passFrom = headerStart;
          else {
            this.target.passOn(Buffer.from(this.frameHeader.subarray(0, this.frameHeaderBytes)));
            passFrom = i;
          }
        }
        this.frameHeaderBytes = 0;
        this.inPayload = true;
      }
      const take = Math.min(this.remaining, chunk.length - i);
      if (this.frameIsOurs && take > 0 && !this.takeOutput(chunk.subarray(i, i + take))) {
        // Oversized: `ws` gets the rest and fails the connection on the stray continuation.
        this.passAll = true;
        this.target.passOn(Buffer.from(chunk.subarray(i)));
        return;
      }
      i += take;
      this.remaining -= take;
      if (this.remaining === 0) this.endFrame();
    }
    flush(chunk.length);
  }

  /** Length of the frame header being read (2 until its length byte is in). */
  private headerLength(): number {
    if (this.frameHeaderBytes < 2) return 2;
    const len7 = this.frameHeader[1]! & 0x7f;
    return len7 === 126 ? 4 : len7 === 127 ? 10 : 2;
  }

  /** A whole frame header: its ownership, or true if its first payload byte decides. */
  private startFrame(): boolean {
    const b0 = this.frameHeader[0]!;
    const b1 = this.frameHeader[1]!;
    const len7 = b1 & 0x7f;
    this.fin = (b0 & 0x80) !== 0;
    const opcode = b0 & 0x0f;
    this.frameIsControl = opcode >= 0x8;
    this.remaining = len7 === 126 ? this.frameHeader.readUInt16BE(2) : len7 === 127 ? Number(this.frameHeader.readBigUInt64BE(2)) : len7;
    if ((b0 & 0x70) !== 0 || (b1 & 0x80) !== 0 || !Number.isSafeInteger(this.remaining)) {
      this.passAll = true;
      return false;
    }
    if (opcode >= 0x8) {
      this.frameIsOurs = false; // control frames may come between the frames of a message
      return false;
    }
    if (opcode === OP_CONTINUATION) {
      if (this.messageOurs === null) this.passAll = true;
      this.frameIsOurs = this.messageOurs === true;
      return false;
    }
    if (this.messageOurs !== null || (opcode !== OP_TEXT && opcode !== OP_BINARY)) {
      this.passAll = true; // a new message inside another, or an unknown opcode
      return false;
    }
    if (opcode === OP_BINARY && this.remaining > 0) return true;
    this.frameIsOurs = false;
    this.messageOurs = false;
    return false;
  }

  private beginOutput(): void {
    this.outputHeaderBytes = 0;
    this.memory = null;
    this.pieces = [];
    this.messageBytes = 0;
  }

  /** Payload bytes of our message; false if it grew past the limit. */
  private takeOutput(bytes: Buffer): boolean {
    this.messageBytes += bytes.length;
    if (this.messageBytes > this.maxMessageBytes) {
      this.dropOutput();
      return false;
    }
    let at = 0;
    if (this.outputHeaderBytes < BINARY_HEADER_BYTES) {
      const n = Math.min(BINARY_HEADER_BYTES - this.outputHeaderBytes, bytes.length);
      bytes.copy(this.outputHeader, this.outputHeaderBytes, 0, n);
      this.outputHeaderBytes += n;
      at = n;
      if (this.outputHeaderBytes === BINARY_HEADER_BYTES) this.memory = this.target.memoryFor(this.outputHeader);
    }
    if (at === bytes.length) return true;
    const rest = bytes.subarray(at);
    const piece = this.memory ? this.memory.copy(rest) : Buffer.from(rest);
    const last = this.pieces[this.pieces.length - 1];
    const merged = last && this.memory ? this.memory.extend(last, piece) : null;
    if (merged) this.pieces[this.pieces.length - 1] = merged;
    else this.pieces.push(piece);
    return true;
  }

  private endFrame(): void {
    this.inPayload = false;
    if (!this.frameIsOurs) {
      if (this.fin && !this.frameIsControl && this.messageOurs === false) this.messageOurs = null;
      return;
    }
    if (!this.fin) return;
    this.messageOurs = null;
    const header = Buffer.from(this.outputHeader.subarray(0, this.outputHeaderBytes));
    const pieces = this.pieces;
    const memory = this.memory;
    this.beginOutput();
    this.target.output(header, pieces, memory);
  }

  private dropOutput(): void {
    this.memory?.releaseAll(this.pieces);
    this.beginOutput();
  }
}
