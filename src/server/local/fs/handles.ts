/**
 * File handles for `fs/open`, `fs/readBlock`, `fs/writeBlock`, `fs/close`: client-chosen ids,
 * at most `capacity` open at once, reads and writes at explicit offsets (so a block re-sent
 * after a lost answer does the same thing again: reads and writes resume by offset).
 * One table lives either with a connection (Codex's rule) or with a session (extension
 * `fsResume`); `closeAll` runs when its owner goes.
 */
import type { FileHandle } from 'node:fs/promises';
import { FsLimits, invalidRequest, type FsOpenMode } from '../../../protocol/index.js';
import { notFound } from '../../fs/errors.js';
import { openForRead, openForReplace } from './files.js';
import type { OpenFileCount } from '../../fs/limiter.js';
import type { NativePath } from '../../fs/uri.js';

interface OpenFile {
  file: FileHandle;
  mode: FsOpenMode;
  /** Extension `fsWritten`: ids of the latest completed numbered writes (oldest first, at most `FsLimits.maxWriteIds`). */
  written?: Set<number>;
}

export function checkHandleId(handleId: string): void {
  if (Buffer.byteLength(handleId) > FsLimits.maxHandleIdBytes) {
    throw invalidRequest(`file handle ID must not exceed ${FsLimits.maxHandleIdBytes} bytes`);
  }
}

export function checkBlockLength(len: number, what: 'read' | 'write'): void {
  if (len < 1 || len > FsLimits.maxBlockBytes) {
    throw invalidRequest(`file ${what} block length must be between 1 and ${FsLimits.maxBlockBytes}`);
  }
}

const unknownHandle = (handleId: string) => notFound(`unknown file handle \`${handleId}\``);
/** Still "unknown file handle" (clients map it to EBADF), saying why. */
const lostHandle = (handleId: string) =>
  notFound(`unknown file handle \`${handleId}\`: it was open when the server restarted, and file handles do not survive a server restart (open the file again)`);

export class HandleTable {
  private readonly open = new Map<string, OpenFile>();
  /** Ids whose open is in flight (reserved so a duplicate or the cap is refused at once). */
  private readonly opening = new Set<string>();
  private closed = false;
  /** Ids open when a predecessor server stopped (issue #27): their use is answered with `lostHandle`, until closed or opened anew. */
  private readonly lost = new Set<string>();

  constructor(
    private readonly capacity: number,
    /** Handles open across the whole server. */
    private readonly serverWide: OpenFileCount,
    /** The set of ids (`ids()`) changed: a handle opened or closed. */
    private readonly onChange: () => void = () => {},
  ) {}

  /** The ids open, and those lost in a restart not yet closed (what a session record keeps). */
  ids(): string[] {
    return [...this.open.keys(), ...this.lost];
  }

  /** A successor server: `ids` were open on its predecessor (bounded by the predecessor's cap). */
  markLost(ids: string[]): void {
    for (const id of ids.slice(0, this.capacity)) this.lost.add(id);
  }

  get size(): number {
    return this.open.size + this.opening.size;
  }

  /**
   * Opens `path` under `handleId`. The id and the cap are checked before the file is touched,
   * so a refused open never truncates anything (Codex truncates first in `replace` mode).
   */
  async openFile(handleId: string, path: NativePath, mode: FsOpenMode): Promise<void> {
    checkHandleId(handleId);
    if (this.open.has(handleId) || this.opening.has(handleId)) throw invalidRequest(`file handle \`${handleId}\` already exists`);
    if (this.size >= this.capacity) {
      throw invalidRequest(`at most ${this.capacity} file handles may be open per connection`);
    }
    this.serverWide.take();
    this.opening.add(handleId);
    let opened = false;
    try {
      const file = mode === 'replace' ? await openForReplace(path) : await openForRead(path);
      if (this.closed) {
        await file.close();
        throw unknownHandle(handleId);
      }
      this.open.set(handleId, { file, mode });
      this.lost.delete(handleId);
      opened = true;
      this.onChange();
    } finally {
      this.opening.delete(handleId);
      if (!opened) this.serverWide.give();
    }
  }

  async readBlock(handleId: string, offset: number, len: number): Promise<{ bytes: Buffer; eof: boolean }> {
    checkHandleId(handleId);
    checkBlockLength(len, 'read');
    const { file } = this.get(handleId);
    const buffer = Buffer.allocUnsafe(len);
    let filled = 0;
    // Short reads are retried until the block is full or the file ends: `eof` means "fewer than len bytes exist here".
    while (filled < len) {
      const { bytesRead } = await file.read(buffer, filled, len - filled, offset + filled);
      if (bytesRead === 0) break;
      filled += bytesRead;
    }
    return { bytes: buffer.subarray(0, filled), eof: filled < len };
  }

  /** `writeId` (extension `fsWritten`): remembered once every byte is written, for `completedWrites`. */
  async writeBlock(handleId: string, offset: number, data: Buffer, writeId?: number): Promise<void> {
    checkHandleId(handleId);
    checkBlockLength(data.length, 'write');
    const entry = this.get(handleId);
    let written = 0;
    while (written < data.length) {
      const { bytesWritten } = await entry.file.write(data, written, data.length - written, offset + written);
      written += bytesWritten;
    }
    if (writeId === undefined) return;
    // Bounded: the oldest ids are forgotten (a forgotten block is merely sent again).
    const ids = (entry.written ??= new Set());
    ids.delete(writeId);
    ids.add(writeId);
    if (ids.size > FsLimits.maxWriteIds) ids.delete(ids.values().next().value!);
  }

  /** Extension `fsWritten`: which of `writeIds` completed on the handle (as far as it remembers). */
  completedWrites(handleId: string, writeIds: number[]): number[] {
    checkHandleId(handleId);
    const { written } = this.get(handleId);
    return written ? writeIds.filter((id) => written.has(id)) : [];
  }

  /** Closing an unknown (or already closed) handle succeeds, as in Codex. */
  async close(handleId: string): Promise<void> {
    checkHandleId(handleId);
    const entry = this.open.get(handleId);
    if (!entry) {
      if (this.lost.delete(handleId)) this.onChange();
      return;
    }
    this.open.delete(handleId);
    this.serverWide.give();
    this.onChange();
    await entry.file.close();
  }

  /** The owner is gone: every handle is closed and no new one opens. */
  async closeAll(): Promise<void> {
    this.closed = true;
    const files = [...this.open.values()];
    this.open.clear();
    for (let i = 0; i < files.length; i++) this.serverWide.give();
    await Promise.all(files.map(({ file }) => file.close().catch(() => {})));
  }

  private get(handleId: string): OpenFile {
    const entry = this.open.get(handleId);
    if (!entry) throw this.lost.has(handleId) ? lostHandle(handleId) : unknownHandle(handleId);
    return entry;
  }
}
