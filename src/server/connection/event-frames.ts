/**
 * A session's events (output, exit, close) as frames for its connection (`sendEntry`): in
 * JSON — `process/output` built straight into one Buffer, exit and close encoded in the
 * client's dialect — or, with the binaryOutput extension, output written as binary frames
 * straight onto the raw socket (binary-output.ts).
 *
 * The connection sends the JSON frames and keeps the send buffer's accounts; this only builds
 * them, and writes the binary ones.
 */
import type WebSocket from 'ws';
import { Method, type Dialect } from '../../protocol/index.js';
import { writeBinaryOutput } from './binary-output.js';
import { rawSocketOf } from '../../util/ws-internals.js';
import { outputParts, type LogEntry, type OutputEntry } from '../output/index.js';

/** Pieces of one output chunk sent as continuation frames at most (more are joined first). */
const MAX_FRAGMENTS = 64;

/** What the frames need of the process whose event they carry (a `ManagedProcess`). */
export interface FramedProcess {
  readonly id: string;
  /** Its binaryOutput handle; 0: its output goes as JSON. */
  readonly handle: number;
  /** An output entry's bytes as one Buffer. */
  outputData(entry: OutputEntry): Buffer;
  /** A socket write of these pieces begins: their memory stays theirs until `releaseOutput`. */
  retainOutput(parts: readonly Buffer[]): void;
  /** The socket write of these pieces completed or failed. */
  releaseOutput(parts: readonly Buffer[]): void;
  /** Codex dialect: the kernel took this process's frames up to `seq`. */
  written(seq: number): void;
}

/** The JSON frame of an event (output of a process without a binary handle, exit, close). */
export function eventFrame(dialect: Dialect, proc: FramedProcess, entry: LogEntry): Buffer | string {
  switch (entry.kind) {
    case 'output':
      return jsonOutputFrame(dialect.usesJsonrpc, proc.id, entry.seq, entry.stream, proc.outputData(entry));
    case 'exit':
      return dialect.encode({
        method: Method.processExited,
        params: { processId: proc.id, seq: entry.seq, exitCode: entry.exitCode, sandboxDenied: false },
      });
    case 'close':
      return dialect.encode({ method: Method.processClosed, params: { processId: proc.id, seq: entry.seq } });
  }
}

/**
 * `process/output` built straight into one Buffer: the base64 needs no escaping, so
 * JSON.stringify need not scan it, and ws sends the Buffer without another copy.
 */
export function jsonOutputFrame(usesJsonrpc: boolean, processId: string, seq: number, stream: string, data: Buffer): Buffer {
  const prefix =
    (usesJsonrpc ? '{"jsonrpc":"2.0","method":"process/output","params":{"processId":' : '{"method":"process/output","params":{"processId":') +
    JSON.stringify(processId) +
    ',"seq":' +
    seq +
    ',"stream":"' +
    stream +
    '","chunk":"';
  const prefixBytes = Buffer.byteLength(prefix);
  const base64Bytes = 4 * Math.ceil(data.length / 3);
  const frame = Buffer.allocUnsafe(prefixBytes + base64Bytes + 3);
  frame.write(prefix, 0, 'utf8');
  frame.write(data.toString('base64'), prefixBytes, 'latin1');
  frame.write('"}}', prefixBytes + base64Bytes, 'latin1');
  return frame;
}

/**
 * Extension binaryOutput: the 16-byte header, then the bytes, written as WebSocket frames
 * straight onto the socket (binary-output.ts): nothing is base64-encoded, serialized or
 * copied, and the message leaves in one writev. (A chunk joined from very many small reads,
 * a chatty pty, is joined first: frame headers would outweigh it.)
 *
 * `written` (when the kernel taking it is the acknowledgement) is told once it is written;
 * `afterSend` runs once the write completed or failed. False when nothing was written (the
 * socket's close handshake began: it takes no more data frames).
 */
export function writeBinaryEntry(
  ws: WebSocket,
  proc: FramedProcess,
  entry: OutputEntry,
  written: FramedProcess | undefined,
  afterSend: () => void,
): boolean {
  if (ws.readyState !== ws.OPEN) return false;
  const socket = rawSocketOf(ws);
  const parts = outputParts(entry).length > MAX_FRAGMENTS ? [proc.outputData(entry)] : outputParts(entry);
  const seq = entry.seq;
  // The socket refers to the bytes until the write completes (or fails): their memory is
  // not reused before, whatever the log does with them meanwhile.
  proc.retainOutput(parts);
  let settled = false;
  writeBinaryOutput(socket, proc.handle, seq, entry.stream, parts, (err) => {
    // Node runs a corked batch's callbacks twice when the socket fails under it (EPIPE):
    // a second release would let the bytes' memory be reused while the log still has them.
    if (settled) return;
    settled = true;
    proc.releaseOutput(parts);
    if (!err) written?.written(seq);
    afterSend();
  });
  return true;
}
