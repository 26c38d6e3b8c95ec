/**
 * Binary WebSocket frames of the tether extension `binaryOutput` (docs/protocol.md, "Extension
 * binaryOutput"): process output as raw bytes behind a fixed 16-byte header, so the hot path
 * has no base64 and no JSON on either side. Everything else stays JSON in text frames.
 *
 *     offset  size  field
 *     0       1     version   1
 *     1       1     kind      1 = output (server → client), 2 = ack (client → server)
 *     2       1     stream    output: 0 stdout, 1 stderr, 2 pty; ack: 0
 *     3       1     flags     0 (reserved: anything else is refused)
 *     4       4     handle    the process's handle (from process/start), unsigned, big-endian
 *     8       8     seq       the event's seq (output) or the cumulative ack (ack), big-endian,
 *                             at most 2^53 - 1
 *     16      …     payload   output: the bytes (at least one); ack: none
 *
 * A JSON message never starts with a byte below 0x09 (it starts with `{`, `[` or JSON
 * whitespace), so a receiver tells the two kinds of binary frame apart by the first byte:
 * `isTetherBinaryFrame`. Pure functions, tested in test/server/connection/binary-frames.test.ts.
 */
import type { OutputStream } from './types.js';

export const BINARY_FRAME_VERSION = 1;
export const BINARY_HEADER_BYTES = 16;
/** Handles are unsigned 32-bit; 0 means "none". */
export const MAX_HANDLE = 0xffff_ffff;

export const BinaryKind = { output: 1, ack: 2 } as const;

const STREAM_CODES: Record<OutputStream, number> = { stdout: 0, stderr: 1, pty: 2 };
const STREAMS: readonly OutputStream[] = ['stdout', 'stderr', 'pty'];

export type BinaryFrame =
  /** `parts`: the bytes as the fragments they came in, when more than one (`data` joins them on use). */
  | { kind: 'output'; handle: number; seq: number; stream: OutputStream; data: Buffer; parts?: readonly Buffer[] }
  | { kind: 'ack'; handle: number; seq: number };

export type BinaryDecodeResult = { ok: true; frame: BinaryFrame } | { ok: false; error: string };

/** True for a binary frame in this format (first byte below any byte a JSON text can start with). */
export function isTetherBinaryFrame(data: Buffer | readonly Buffer[]): boolean {
  const first = Buffer.isBuffer(data) ? data : data.find((fragment) => fragment.length > 0);
  return first !== undefined && first.length > 0 && first[0]! < 0x09;
}

function writeHeader(target: Buffer, kind: number, stream: number, handle: number, seq: number): void {
  target[0] = BINARY_FRAME_VERSION;
  target[1] = kind;
  target[2] = stream;
  target[3] = 0;
  target.writeUInt32BE(handle, 4);
  // seq < 2^53: the high word is exact as a float division.
  target.writeUInt32BE(Math.floor(seq / 0x1_0000_0000), 8);
  target.writeUInt32BE(seq >>> 0, 12);
}

/**
 * Whose output an output frame's 16-byte header announces, before its bytes arrive (the
 * client's demux decides from it where to copy them); null for anything else.
 */
export function peekOutputHeader(header: Buffer): { handle: number; stream: OutputStream } | null {
  if (header.length < BINARY_HEADER_BYTES || header[0] !== BINARY_FRAME_VERSION || header[1] !== BinaryKind.output) return null;
  const stream = (['stdout', 'stderr', 'pty'] as const)[header[2]!];
  return stream ? { handle: header.readUInt32BE(4), stream } : null;
}

/**
 * The header of an output frame alone. A sender that has the bytes in pieces sends it as the
 * first fragment of a WebSocket message and the pieces as the continuation frames, so the
 * bytes are never copied into one buffer (the receiver sees one message all the same).
 */
export function outputFrameHeader(handle: number, seq: number, stream: OutputStream): Buffer {
  const header = Buffer.allocUnsafe(BINARY_HEADER_BYTES);
  writeHeader(header, BinaryKind.output, STREAM_CODES[stream], handle, seq);
  return header;
}

/** One output frame: header and bytes in one buffer. */
export function encodeOutputFrame(handle: number, seq: number, stream: OutputStream, data: Buffer): Buffer {
  const frame = Buffer.allocUnsafe(BINARY_HEADER_BYTES + data.length);
  writeHeader(frame, BinaryKind.output, STREAM_CODES[stream], handle, seq);
  data.copy(frame, BINARY_HEADER_BYTES);
  return frame;
}

/** One ack frame: the client consumed every event of `handle` up to `seq`. */
export function encodeAckFrame(handle: number, seq: number): Buffer {
  const frame = Buffer.allocUnsafe(BINARY_HEADER_BYTES);
  writeHeader(frame, BinaryKind.ack, 0, handle, seq);
  return frame;
}

/**
 * Decodes one binary frame of this format. Never throws: anything malformed (short, another
 * version, an unknown kind, stream or flag, a seq beyond 2^53 - 1, a payload where none
 * belongs or none where one does) is `{ok: false, error}` with a sentence saying what.
 * `data` of an output frame is a view into `buf` (no copy).
 */
export function decodeBinaryFrame(buf: Buffer): BinaryDecodeResult {
  if (buf.length < BINARY_HEADER_BYTES) {
    return { ok: false, error: `binary frame too short: ${buf.length} bytes, the header alone is ${BINARY_HEADER_BYTES}` };
  }
  return decodeParts(buf, buf.subarray(BINARY_HEADER_BYTES));
}

/**
 * The same for a message received as fragments (ws's binaryType 'fragments'): when the
 * header came as a fragment of its own (as tether sends it) and the bytes as one more, they
 * are used as they are; only bytes in several fragments are joined.
 */
export function decodeBinaryFragments(fragments: readonly Buffer[]): BinaryDecodeResult {
  const first = fragments[0];
  if (fragments.length === 1 && first) return decodeBinaryFrame(first);
  if (!first || first.length < BINARY_HEADER_BYTES) return decodeBinaryFrame(Buffer.concat(fragments));
  // The first fragment is the header, or the header and the first piece of the bytes.
  const parts = first.length === BINARY_HEADER_BYTES ? fragments.slice(1) : [first.subarray(BINARY_HEADER_BYTES), ...fragments.slice(1)];
  const decoded = decodeParts(first, parts.length === 1 ? parts[0]! : EMPTY_PAYLOAD, parts.length);
  if (decoded.ok && decoded.frame.kind === 'output' && parts.length > 1) {
    // The bytes stay in their pieces (`parts`); `data` joins them only if someone reads it.
    let joined: Buffer | undefined;
    const frame = decoded.frame;
    return {
      ok: true,
      frame: {
        kind: 'output',
        handle: frame.handle,
        seq: frame.seq,
        stream: frame.stream,
        parts,
        get data(): Buffer {
          return (joined ??= Buffer.concat(parts));
        },
      },
    };
  }
  return decoded;
}

const EMPTY_PAYLOAD = Buffer.alloc(0);

/**
 * `buf`: at least the 16 header bytes (checked by the caller); `payload`: what follows them,
 * or — when it came in several pieces — nothing, with `pieces` saying how many.
 */
function decodeParts(buf: Buffer, payload: Buffer, pieces = payload.length > 0 ? 1 : 0): BinaryDecodeResult {
  const version = buf[0]!;
  if (version !== BINARY_FRAME_VERSION) return { ok: false, error: `unsupported binary frame version ${version} (this build speaks ${BINARY_FRAME_VERSION})` };
  const kind = buf[1]!;
  const streamCode = buf[2]!;
  const flags = buf[3]!;
  if (flags !== 0) return { ok: false, error: `binary frame flags must be 0 (got ${flags})` };
  const handle = buf.readUInt32BE(4);
  const high = buf.readUInt32BE(8);
  if (high > 0x1f_ffff) return { ok: false, error: 'binary frame seq is beyond 2^53 - 1' };
  const seq = high * 0x1_0000_0000 + buf.readUInt32BE(12);
  if (handle === 0 && (kind === BinaryKind.output || kind === BinaryKind.ack)) return { ok: false, error: 'binary frame handle must not be 0' };
  switch (kind) {
    case BinaryKind.output: {
      const stream = STREAMS[streamCode];
      if (stream === undefined) return { ok: false, error: `binary output frame has an unknown stream ${streamCode}` };
      if (seq === 0) return { ok: false, error: 'binary output frame seq must be at least 1' };
      if (payload.length === 0 && pieces <= 1) return { ok: false, error: 'binary output frame carries no bytes' };
      return { ok: true, frame: { kind: 'output', handle, seq, stream, data: payload } };
    }
    case BinaryKind.ack:
      if (streamCode !== 0) return { ok: false, error: `binary ack frame stream must be 0 (got ${streamCode})` };
      if (payload.length !== 0 || pieces > 1) {
        return { ok: false, error: `binary ack frame must be exactly ${BINARY_HEADER_BYTES} bytes (got ${BINARY_HEADER_BYTES + payload.length})` };
      }
      return { ok: true, frame: { kind: 'ack', handle, seq } };
    default:
      return { ok: false, error: `unknown binary frame kind ${kind}` };
  }
}

/** Joins the fragments ws may hand over (`Buffer[]` for a fragmented message) into one Buffer. */
export function binaryPayload(data: Buffer | ArrayBuffer | Buffer[]): Buffer {
  if (Buffer.isBuffer(data)) return data;
  if (Array.isArray(data)) return Buffer.concat(data);
  return Buffer.from(data);
}
