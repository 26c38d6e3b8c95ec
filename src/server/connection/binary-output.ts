/**
 * Writes one binary output message (extension binaryOutput, protocol/binary-frames.ts)
 * straight onto a WebSocket's TCP socket, as WebSocket frames built here: the output's
 * pieces are never joined or copied, and the whole message leaves in one writev.
 *
 * The message is cut into frames of at most FRAME_PIECE_BYTES (the first one starting with
 * the 16-byte output header). The tether client copies output out of each socket read as it
 * comes (client/frame-demux.ts), so frame size costs it nothing; larger frames cost the
 * server fewer iovecs and the client fewer frame headers (16 KiB frames, which suited `ws`'s
 * parser, measured 0.76x of the Node floor in bench/stream.ts's setting; 256 KiB 0.84-0.90x).
 * Going around `ws`'s sender spares the server its per-frame work (`ws.send` per piece costs
 * about as much as the bytes themselves here).
 *
 * Only for a server socket (frames are not masked) with no permessage-deflate (tether never
 * negotiates it) and nothing of ws's own queued (ws queues only while compressing), so these
 * frames cannot interleave with another message. The socket comes from rawSocketOf
 * (util/ws-internals.ts, which lists what this relies on in `ws`; test/util/ws-contract.test.ts
 * checks it against the installed version).
 */
import type { OutputStream } from '../../protocol/index.js';
import { outputFrameHeader } from '../../protocol/binary-frames.js';

/** Largest WebSocket frame of binary output (see above). */
export const FRAME_PIECE_BYTES = 256 * 1024;

const OPCODE_BINARY = 0x2;
const OPCODE_CONTINUATION = 0x0;
const FIN = 0x80;

/** What this needs of the socket: Node's net.Socket. */
export interface FrameSocket {
  cork(): void;
  uncork(): void;
  write(data: Buffer, callback?: (err?: Error | null) => void): boolean;
}

/** A WebSocket frame header (server to client: no mask) for a payload of `length` bytes. */
function frameHeader(opcode: number, fin: boolean, length: number): Buffer {
  const first = (fin ? FIN : 0) | opcode;
  if (length < 126) return Buffer.from([first, length]);
  if (length < 0x1_0000) {
    const header = Buffer.allocUnsafe(4);
    header[0] = first;
    header[1] = 126;
    header.writeUInt16BE(length, 2);
    return header;
  }
  const header = Buffer.allocUnsafe(10);
  header[0] = first;
  header[1] = 127;
  header.writeUInt32BE(Math.floor(length / 0x1_0000_0000), 2);
  header.writeUInt32BE(length >>> 0, 6);
  return header;
}

/**
 * Writes the message: header + `parts` (at least one, each non-empty), cut into frames.
 * `written` runs once the socket has taken the last byte (or with the error it failed with).
 * Returns the bytes handed to the socket.
 */
export function writeBinaryOutput(
  socket: FrameSocket,
  handle: number,
  seq: number,
  stream: OutputStream,
  parts: readonly Buffer[],
  written: (err?: Error | null) => void,
): number {
  // The pieces, none larger than a frame: views into the parts, never copies.
  const pieces: Buffer[] = [];
  for (const part of parts) {
    if (part.length <= FRAME_PIECE_BYTES) pieces.push(part);
    else for (let at = 0; at < part.length; at += FRAME_PIECE_BYTES) pieces.push(part.subarray(at, at + FRAME_PIECE_BYTES));
  }
  const last = pieces.length - 1;
  let total = 0;
  socket.cork();
  try {
    for (let i = 0; i <= last; i++) {
      const piece = pieces[i]!;
      if (i === 0) {
        // The first frame carries the output header, then the first piece (two buffers, one frame).
        const header = outputFrameHeader(handle, seq, stream);
        const ws = frameHeader(OPCODE_BINARY, last === 0, header.length + piece.length);
        socket.write(ws);
        socket.write(header);
        total += ws.length + header.length;
      } else {
        const ws = frameHeader(OPCODE_CONTINUATION, i === last, piece.length);
        socket.write(ws);
        total += ws.length;
      }
      if (i === last) socket.write(piece, written);
      else socket.write(piece);
      total += piece.length;
    }
  } finally {
    socket.uncork();
  }
  return total;
}
