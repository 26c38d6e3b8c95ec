/**
 * Inbound routing: the processes a client follows, and the server's JSON notifications and
 * binary output frames (extension `binaryOutput`) delivered to them.
 */
import { decodeBinaryFragments, peekOutputHeader } from '../protocol/binary-frames.js';
import { Method, type OutputStream } from '../protocol/types.js';
import type { ByteArena } from '../util/byte-arena.js';
import { isLive, outputMemoryOf, sequencerOf, type ExecProcess } from './process/process.js';
import { outputEvent } from './sequencer.js';
import { AttachMethod, type SessionEndedNotification, type SessionWriterNotification } from './attach/attach-wire.js';

export interface InboundHost {
  /** `fs/missingChanged` arrived for a watch. */
  missingChanged(watchId: number): void;
  /** A close arrived for a process already forgotten (its close ack was lost with a socket). */
  forgottenClose(processId: string, seq: number): void;
  /** Extension `attach`: `session/writer`, this connection is no longer its session's writer. */
  writerChanged?(params: SessionWriterNotification): void;
  /** Extension `attach`: the watched session ended (`session/ended`). */
  sessionEnded?(params: SessionEndedNotification): void;
}

/** What arrived for a process not known yet while held (`hold`): replayed by `release`. */
type Held = { kind: 'json'; method: string; params: unknown } | { kind: 'binary'; fragments: Buffer[] };

/** Closed processes remembered after they are forgotten (the most recent ones), for resumes. */
export const FORGOTTEN_KEPT = 256;

export class ProcessTable {
  private readonly processes = new Map<string, ExecProcess>();
  /**
   * Processes forgotten after their close was delivered: the seq of that close, oldest first,
   * at most FORGOTTEN_KEPT. A resume tells the server they were delivered (and acknowledges
   * them again): their final ack may have been lost with the socket, and the server would
   * otherwise send all their unacknowledged output again, for nothing.
   */
  private readonly forgottenClosed = new Map<string, number>();
  /** Extension `binaryOutput`: the processes by the handle their frames carry (chosen here, sent with process/start). */
  private readonly byHandle = new Map<number, ExecProcess>();
  private readonly handles = new Map<ExecProcess, number>();
  private nextHandle = 1;
  /**
   * Extension `attach`: while an attach's `initialize` answer is awaited, events of processes
   * not known yet are kept here (the answer lists them; their events may come in the same
   * read, before the handles exist) and replayed in order by `release`. Bounded by what the
   * server sends unacknowledged: its output window per process.
   */
  private held: Held[] | null = null;

  constructor(private readonly host: InboundHost) {}

  /** Keep events of unknown processes until `release` (an attach is being answered). */
  hold(): void {
    this.held ??= [];
  }

  /** Replays what `hold` kept, now that the handles exist; unknown ones are then treated as usual. */
  release(): void {
    const held = this.held;
    this.held = null;
    for (const item of held ?? []) {
      if (item.kind === 'json') this.onNotification(item.method, item.params);
      else this.onBinaryFrame(item.fragments);
    }
  }

  /** Registers a process the client did not start (extension `attach`), under the frame handle its starter chose. */
  adopt(proc: ExecProcess, handle: number | undefined): void {
    this.processes.set(proc.id, proc);
    this.forgottenClosed.delete(proc.id);
    if (handle !== undefined && handle > 0) {
      this.handles.set(proc, handle);
      this.byHandle.set(handle, proc);
      this.nextHandle = Math.max(this.nextHandle, handle + 1);
    }
  }

  has(processId: string): boolean {
    return this.processes.has(processId);
  }

  /** Every followed process (live or not yet forgotten). */
  all(): ExecProcess[] {
    return [...this.processes.values()];
  }

  live(): ExecProcess[] {
    return this.all().filter((p) => isLive(p));
  }

  /** Registers before the start is sent (output may arrive before its answer); `binary`: give it a frame handle. */
  add(proc: ExecProcess, binary: boolean): void {
    this.processes.set(proc.id, proc);
    this.forgottenClosed.delete(proc.id);
    if (binary) {
      // Chosen here, so frames that overtake (or outlive) the start answer still find their process.
      const handle = this.nextHandle++;
      this.handles.set(proc, handle);
      this.byHandle.set(handle, proc);
    }
  }

  /** Extension `binaryOutput`: the handle of `proc`'s frames (0: none). */
  handleOf(proc: ExecProcess): number {
    return this.handles.get(proc) ?? 0;
  }

  /** The handle of a followed process by id (0: none, or forgotten). */
  handleOfId(processId: string): number {
    const proc = this.processes.get(processId);
    return proc ? this.handleOf(proc) : 0;
  }

  forget(proc: ExecProcess): void {
    if (this.processes.get(proc.id) === proc) {
      this.processes.delete(proc.id);
      const sequencer = sequencerOf(proc);
      if (sequencer.done) {
        this.forgottenClosed.set(proc.id, sequencer.lastDelivered);
        if (this.forgottenClosed.size > FORGOTTEN_KEPT) this.forgottenClosed.delete(this.forgottenClosed.keys().next().value!);
      }
    }
    const handle = this.handles.get(proc);
    if (handle !== undefined && this.byHandle.get(handle) === proc) this.byHandle.delete(handle);
  }

  /** Forgotten processes whose close was delivered: id → the close's seq (see `forgottenClosed`). */
  forgotten(): ReadonlyMap<string, number> {
    return this.forgottenClosed;
  }

  clear(): void {
    this.processes.clear();
    this.forgottenClosed.clear();
    this.byHandle.clear();
  }

  onNotification(method: string, params: unknown): void {
    if (!params || typeof params !== 'object') return;
    const p = params as Record<string, unknown>;
    if (method === 'fs/missingChanged') {
      if (typeof p.watchId === 'number') this.host.missingChanged(p.watchId);
      return;
    }
    if (method === AttachMethod.sessionEnded) {
      if (typeof p.reason === 'string' && Array.isArray(p.processes)) this.host.sessionEnded?.(p as unknown as SessionEndedNotification);
      return;
    }
    if (method === AttachMethod.sessionWriter) {
      if (typeof p.writer === 'boolean') this.host.writerChanged?.({ writer: p.writer, ...(typeof p.reason === 'string' ? { reason: p.reason } : {}) });
      return;
    }
    if (this.held && typeof p.processId === 'string' && !this.processes.has(p.processId)) {
      this.held.push({ kind: 'json', method, params });
      return;
    }
    if (method === Method.processGap) {
      // Extension `keepLast`: the server dropped these seqs unread (`--keep-last`).
      if (typeof p.processId === 'string' && typeof p.firstSeq === 'number' && typeof p.lastSeq === 'number' && p.firstSeq <= p.lastSeq) {
        this.processes.get(p.processId)?.acceptGap(p.firstSeq, p.lastSeq);
      }
      return;
    }
    if (typeof p.processId !== 'string' || typeof p.seq !== 'number') return;
    const proc = this.processes.get(p.processId);
    if (!proc) {
      // Closed and forgotten: tell the server again, so it can forget the process too.
      if (method === Method.processClosed) this.host.forgottenClose(p.processId, p.seq);
      return;
    }
    switch (method) {
      case Method.processOutput:
      {
        if (typeof p.chunk !== 'string') return;
        const stream = (p.stream as OutputStream) ?? 'stdout';
        // Into reused memory when its sink is done with it once written, as for binary output.
        const memory = outputMemoryOf(proc, stream);
        proc.accept({ type: 'output', seq: p.seq, stream, data: memory ? decodeBase64Into(memory, p.chunk) : Buffer.from(p.chunk, 'base64') }, memory);
        return;
      }
      case Method.processExited:
        proc.accept({ type: 'exit', seq: p.seq, exitCode: typeof p.exitCode === 'number' ? p.exitCode : -1 });
        return;
      case Method.processClosed:
        proc.accept({ type: 'close', seq: p.seq });
        return;
    }
  }

  /** Extension `binaryOutput`: one output frame (anything else from a server is ignored, like garbage JSON). */
  onBinaryFrame(fragments: Buffer[]): void {
    const decoded = decodeBinaryFragments(fragments);
    if (!decoded.ok || decoded.frame.kind !== 'output') return;
    const frame = decoded.frame;
    if (this.held && !this.byHandle.has(frame.handle)) {
      this.held.push({ kind: 'binary', fragments: fragments.map((f) => Buffer.from(f)) });
      return;
    }
    this.byHandle.get(frame.handle)?.accept(outputEvent(frame.seq, frame.stream, frame.parts ?? [frame.data]));
  }

  /** Extension `binaryOutput`, taken off the socket whole (client/demux-socket.ts): where its bytes may go. */
  outputMemoryFor(header: Buffer): ByteArena | null {
    const target = peekOutputHeader(header);
    const proc = target && this.byHandle.get(target.handle);
    return proc ? outputMemoryOf(proc, target.stream) : null;
  }

  /** Extension `binaryOutput`, taken off the socket whole: one output message, its bytes in `memory` (or its own). */
  onBinaryOutput(header: Buffer, pieces: Buffer[], memory: ByteArena | null): void {
    const decoded = decodeBinaryFragments([header, ...pieces]);
    const frame = decoded.ok && decoded.frame.kind === 'output' ? decoded.frame : null;
    const proc = frame ? this.byHandle.get(frame.handle) : undefined;
    if (frame && !proc && this.held) {
      this.held.push({ kind: 'binary', fragments: [header, ...pieces].map((f) => Buffer.from(f)) });
      memory?.releaseAll(pieces);
      return;
    }
    if (!frame || !proc) {
      memory?.releaseAll(pieces);
      return;
    }
    proc.accept(outputEvent(frame.seq, frame.stream, frame.parts ?? [frame.data]), memory);
  }
}

/** Decoded base64 up to this size goes through one reused buffer into the arena (larger: its own Buffer). */
const SCRATCH_BYTES = 256 * 1024;
let scratch: Buffer | undefined;

/**
 * `chunk` decoded into `memory` (a view, one reference): through a reused scratch buffer, so
 * a stream of JSON output allocates nothing per message (a Buffer per message was external
 * memory for V8 to collect).
 */
function decodeBase64Into(memory: ByteArena, chunk: string): Buffer {
  if ((chunk.length >>> 2) * 3 + 3 > SCRATCH_BYTES) return Buffer.from(chunk, 'base64');
  scratch ??= Buffer.allocUnsafeSlow(SCRATCH_BYTES);
  const n = scratch.write(chunk, 'base64');
  return memory.copy(scratch.subarray(0, n));
}
