/**
 * Remote file handles (`fs/open`, `fs/readBlock`, `fs/writeBlock`, `fs/close`) and the
 * pipelined block transfers built on them (readFile of a large file, streams, `tether cp`).
 * Through a drop: with `fsResume` the handle lives on in the session and every block is simply
 * re-sent (reads and writes are at explicit offsets, so a copy does the same thing again);
 * without it the handle died with the connection: a read handle is opened again and reading
 * resumes at its offset, a write fails with OutcomeUnknownError (opening again for replace
 * would truncate what was written).
 */
import { randomBytes } from 'node:crypto';
import { Readable, Writable } from 'node:stream';
// The protocol one module at a time: the barrel would load the server's zod schemas.
import { Base64Text } from '../../protocol/dialect.js';
import { RpcError } from '../../protocol/errors.js';
import { FsLimits, FsMethod } from '../../protocol/fs-methods.js';
import type { FsOpenMode, FsReadBlockResult, FsWrittenResult } from '../../protocol/fs.js';
import { ConnectionLostError } from '../errors.js';
import { isUnknownHandle, OutcomeUnknownError, toFsError } from './errors.js';
import type { FsRequests } from './requests.js';

/** Block size of transfers: the protocol's maximum. */
export const BLOCK_BYTES = FsLimits.maxBlockBytes;
/** Blocks in flight at once per transfer (keeps a high-latency link busy). */
export const WINDOW = 8;
/**
 * Uploads (writeStream) go in smaller blocks, with an adaptive number of bytes in flight: a
 * cut loses what the server had not read yet (socket buffers), so what may be in flight
 * shrinks at every drop and grows back while blocks are acknowledged, as TCP's congestion
 * window does; a good link still gets `max` in flight, a link cut every few MiB a few
 * blocks' worth.
 */
export const WRITE_BLOCK_BYTES = 128 * 1024;
export const WRITE_WINDOW = { initial: 1024 * 1024, min: 2 * WRITE_BLOCK_BYTES, max: 8 * 1024 * 1024 } as const;

const newHandleId = () => `t${randomBytes(12).toString('hex')}`;

export class RemoteFileHandle {
  private handleId: string;
  private openedIn: number;
  private closed = false;
  /** Where the next read or write without a position goes (as a FileHandle does). */
  private position = 0;
  /** Extension `fsWritten`: the id of the next block write. */
  private nextWriteId = 0;
  /** The pending `fs/written` question that blocks lost with a connection join (until it is sent). */
  private probe: { joining: boolean; writeIds: number[]; answer: Promise<Set<number>> } | undefined;

  private constructor(
    private readonly requests: FsRequests,
    readonly uri: string,
    readonly path: string,
    readonly mode: FsOpenMode,
    handleId: string,
  ) {
    this.handleId = handleId;
    this.openedIn = requests.host.generation;
  }

  static async open(requests: FsRequests, uri: string, path: string, mode: FsOpenMode): Promise<RemoteFileHandle> {
    const handleId = newHandleId();
    const params = { handleId, path: uri, mode };
    if (mode === 'replace' || requests.resumable) await requests.mutate(FsMethod.open, params, 'open', path);
    else await requests.read(FsMethod.open, params, 'open', path); // a read handle opened twice is harmless: the first died with its connection
    return new RemoteFileHandle(requests, uri, path, mode, handleId);
  }

  /** Reads up to `len` bytes at `offset`; `eof` when fewer exist. */
  async readBlock(offset: number, len: number): Promise<{ data: Buffer; eof: boolean }> {
    for (;;) {
      this.checkOpen();
      if (!this.requests.resumable && this.openedIn !== this.requests.host.generation) await this.reopen();
      try {
        const block = await this.requests.host.requestOnce<FsReadBlockResult>(FsMethod.readBlock, { handleId: this.handleId, offset, len });
        return { data: Buffer.from(block.chunk, 'base64'), eof: block.eof };
      } catch (err) {
        if (err instanceof ConnectionLostError) continue; // re-read at the same offset (re-opened first if need be)
        if (!this.requests.resumable && isUnknownHandle(err)) {
          this.openedIn = -1; // died with an earlier connection: open again
          continue;
        }
        throw toFsError(err, 'read', this.path);
      }
    }
  }

  /** `onDrop`: called when the connection carrying the block was lost (it is then asked about or sent again). */
  async writeBlock(offset: number, data: Buffer, onDrop?: () => void): Promise<void> {
    this.checkOpen();
    const params = { handleId: this.handleId, offset, chunk: new Base64Text(data.toString('base64')) };
    if (this.requests.resumable && this.requests.host.extensions.has('fsWritten')) {
      // Lost with a connection, the block may well have landed: ask before sending it again.
      const writeId = this.nextWriteId++;
      for (;;) {
        try {
          await this.requests.host.requestOnce(FsMethod.writeBlock, { ...params, writeId });
          return;
        } catch (err) {
          if (!(err instanceof ConnectionLostError)) throw toFsError(err, 'write', this.path);
          onDrop?.();
          if (await this.landed(writeId)) return;
        }
      }
    }
    if (this.requests.resumable) {
      for (;;) {
        try {
          await this.requests.host.requestOnce(FsMethod.writeBlock, params);
          return;
        } catch (err) {
          if (!(err instanceof ConnectionLostError)) throw toFsError(err, 'write', this.path);
          onDrop?.(); // and sent again: at its offset it does the same thing again
        }
      }
    }
    if (this.openedIn !== this.requests.host.generation) throw new OutcomeUnknownError('write', this.path);
    try {
      await this.requests.host.requestOnce(FsMethod.writeBlock, params);
    } catch (err) {
      if (err instanceof ConnectionLostError || isUnknownHandle(err)) throw new OutcomeUnknownError('write', this.path, { cause: err });
      throw toFsError(err, 'write', this.path);
    }
  }

  /** `FileHandle.read` in small: into `buffer` at `offset`, `length` bytes from `position` (or the current position). */
  async read(buffer: Buffer, offset = 0, length = buffer.length - offset, position: number | null = null): Promise<{ bytesRead: number; buffer: Buffer }> {
    const at = position ?? this.position;
    let bytesRead = 0;
    while (bytesRead < length) {
      const { data, eof } = await this.readBlock(at + bytesRead, Math.min(BLOCK_BYTES, length - bytesRead));
      data.copy(buffer, offset + bytesRead);
      bytesRead += data.length;
      if (eof) break;
    }
    if (position === null) this.position += bytesRead;
    return { bytesRead, buffer };
  }

  /** `FileHandle.write` in small. */
  async write(buffer: Buffer, offset = 0, length = buffer.length - offset, position: number | null = null): Promise<{ bytesWritten: number; buffer: Buffer }> {
    const at = position ?? this.position;
    for (let done = 0; done < length; done += BLOCK_BYTES) {
      await this.writeBlock(at + done, buffer.subarray(offset + done, offset + Math.min(length, done + BLOCK_BYTES)));
    }
    if (position === null) this.position += length;
    return { bytesWritten: length, buffer };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    // A handle of a server without fsResume died with its connection: nothing to close.
    if (!this.requests.resumable && this.openedIn !== this.requests.host.generation) return;
    try {
      await this.requests.host.requestOnce(FsMethod.close, { handleId: this.handleId });
    } catch (err) {
      if (!(err instanceof ConnectionLostError)) throw toFsError(err, 'close', this.path);
      // Lost answer: with fsResume closing again is harmless; without, the handle is gone anyway.
      if (this.requests.resumable) await this.requests.read(FsMethod.close, { handleId: this.handleId }, 'close', this.path);
    }
  }

  /**
   * Whether the numbered write lost with a connection completed on the server (`fs/written`).
   * Every block lost with the same connection joins one question; it is sent after they all
   * failed, so a block that landed before the drop is reported. One still being written then
   * is not: it is sent again, which writes the same bytes at the same offset.
   */
  private landed(writeId: number): Promise<boolean> {
    let probe = this.probe;
    if (!probe || !probe.joining || probe.writeIds.length >= FsLimits.maxWriteIds) {
      const writeIds: number[] = [];
      const created: NonNullable<RemoteFileHandle['probe']> = { joining: true, writeIds, answer: Promise.resolve(new Set()) };
      created.answer = (async () => {
        await new Promise((resolve) => setImmediate(resolve)); // the other blocks of the drop fail meanwhile
        created.joining = false;
        const result = await this.requests.read<FsWrittenResult>(FsMethod.written, { handleId: this.handleId, writeIds }, 'write', this.path);
        return new Set(result.writeIds);
      })();
      this.probe = probe = created;
    }
    probe.writeIds.push(writeId);
    return probe.answer.then((done) => done.has(writeId));
  }

  private checkOpen(): void {
    if (this.closed) throw toFsError(new RpcError(-32004, `unknown file handle \`${this.handleId}\``), 'read', this.path);
  }

  private async reopen(): Promise<void> {
    if (this.mode !== 'read') throw new OutcomeUnknownError('write', this.path);
    const handleId = newHandleId();
    await this.requests.read(FsMethod.open, { handleId, path: this.uri, mode: 'read' }, 'open', this.path);
    this.handleId = handleId;
    this.openedIn = this.requests.host.generation;
  }
}

/** The file's bytes from `start`, in order, with up to WINDOW blocks in flight. */
export async function* readBlocks(handle: RemoteFileHandle, start = 0, end = Infinity): AsyncGenerator<Buffer> {
  const inFlight: Array<Promise<{ data: Buffer; eof: boolean }>> = [];
  let next = start;
  const fill = () => {
    while (inFlight.length < WINDOW && next < end) {
      const len = Math.min(BLOCK_BYTES, end - next);
      const request = handle.readBlock(next, len);
      request.catch(() => {}); // awaited in order below
      inFlight.push(request);
      next += len;
    }
  };
  fill();
  while (inFlight.length > 0) {
    const { data, eof } = await inFlight.shift()!;
    if (data.length > 0) yield data;
    if (eof) return;
    fill();
  }
}

/** A Readable of a remote file (opened by the caller), closing the handle at the end. */
export function readStream(open: () => Promise<RemoteFileHandle>, options: { start?: number; end?: number } = {}): Readable {
  let handle: RemoteFileHandle | undefined;
  return Readable.from(
    (async function* () {
      handle = await open();
      try {
        // `end` is inclusive, as in fs.createReadStream.
        yield* readBlocks(handle, options.start ?? 0, options.end === undefined ? Infinity : options.end + 1);
      } finally {
        await handle.close().catch(() => {});
      }
    })(),
    { objectMode: false },
  );
}

/**
 * A Writable into a remote file replaced from the start, in WRITE_BLOCK_BYTES blocks with an
 * adaptive window of bytes in flight (WRITE_WINDOW); `finish` once every block landed and the
 * handle closed.
 */
export function writeStream(open: () => Promise<RemoteFileHandle>): Writable {
  let handle: Promise<RemoteFileHandle> | undefined;
  let offset = 0;
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  const inFlight = new Set<Promise<void>>();
  let inFlightBytes = 0;
  let failure: Error | undefined;
  // Slow start up to `threshold` (doubling per window acknowledged), then one block more per
  // window; a drop halves both. The blocks lost with one connection count as one drop.
  let window: number = WRITE_WINDOW.initial;
  let threshold: number = WRITE_WINDOW.max;
  let dropNoted = false;
  const onDrop = () => {
    if (dropNoted) return;
    dropNoted = true;
    setImmediate(() => (dropNoted = false));
    window = threshold = Math.max(WRITE_WINDOW.min, Math.floor(window / 2));
  };
  const acknowledged = (bytes: number) => {
    window += window < threshold ? bytes : Math.ceil((bytes * WRITE_BLOCK_BYTES) / window);
    window = Math.min(WRITE_WINDOW.max, window);
  };

  const send = async (data: Buffer) => {
    const h = await (handle ??= open());
    const at = offset;
    offset += data.length;
    inFlightBytes += data.length;
    const request = h.writeBlock(at, data, onDrop).then(
      () => {
        inFlight.delete(request);
        inFlightBytes -= data.length;
        acknowledged(data.length);
      },
      (err: Error) => {
        inFlight.delete(request);
        inFlightBytes -= data.length;
        failure ??= err;
      },
    );
    inFlight.add(request);
    while (inFlight.size > 0 && inFlightBytes >= window) await Promise.race(inFlight);
    if (failure) throw failure;
  };
  const flushFull = async () => {
    if (pendingBytes < WRITE_BLOCK_BYTES) return;
    let rest = Buffer.concat(pending, pendingBytes); // once per chunk, not once per block
    while (rest.length >= WRITE_BLOCK_BYTES) {
      const block = rest.subarray(0, WRITE_BLOCK_BYTES);
      rest = rest.subarray(WRITE_BLOCK_BYTES);
      pending = [rest];
      pendingBytes = rest.length;
      await send(block);
    }
  };
  return new Writable({
    highWaterMark: WRITE_BLOCK_BYTES,
    write(chunk: Buffer, _encoding, callback) {
      pending.push(chunk);
      pendingBytes += chunk.length;
      flushFull().then(() => callback(), callback);
    },
    final(callback) {
      (async () => {
        if (pendingBytes > 0) await send(Buffer.concat(pending, pendingBytes));
        const h = await (handle ??= open()); // an empty file is still created
        await Promise.all(inFlight);
        if (failure) throw failure;
        await h.close();
      })().then(() => callback(), callback);
    },
    destroy(error, callback) {
      if (handle) void handle.then((h) => h.close()).catch(() => {});
      callback(error);
    },
  });
}
