/**
 * The local back-end's file handles for `fs/open`, `fs/readBlock`, `fs/writeBlock`, `fs/close`:
 * client-chosen ids, at most `capacity` open at once (the ids, the cap and the refusals are
 * fs/handle-ids.ts, shared with the relay), reads and writes at explicit offsets (so a block
 * re-sent after a lost answer does the same thing again: reads and writes resume by offset).
 * One table lives either with a connection (Codex's rule) or with a session (extension
 * `fsResume`); `closeAll` runs when its owner goes.
 */
import type { FileHandle } from 'node:fs/promises';
import { FsLimits, type FsOpenMode } from '../../../protocol/index.js';
import type { NativePath, OpenFileSlots } from '../../backend/index.js';
import { checkBlockLength, checkHandleId, HandleIds, unknownHandle } from '../../fs/index.js';
import { openForRead, openForReplace } from './files.js';

interface OpenFile {
  file: FileHandle;
  mode: FsOpenMode;
  /** Extension `fsWritten`: ids of the latest completed numbered writes (oldest first, at most `FsLimits.maxWriteIds`). */
  written?: Set<number>;
}

export class HandleTable {
  /** The ids and their refusals (fs/handle-ids.ts, shared with the relay); here each stands for an open file. */
  private readonly files: HandleIds<OpenFile>;
  private closed = false;

  constructor(
    capacity: number,
    /** Handles open across the whole server. */
    private readonly serverWide: OpenFileSlots,
    /** The set of ids (`ids()`) changed: a handle opened or closed. */
    onChange: () => void = () => {},
  ) {
    this.files = new HandleIds(capacity, onChange);
  }

  /** The ids open, and those lost in a restart not yet closed (what a session record keeps). */
  ids(): string[] {
    return this.files.ids();
  }

  /** A successor server: `ids` were open on its predecessor (bounded by the predecessor's cap). */
  markLost(ids: string[]): void {
    this.files.markLost(ids);
  }

  get size(): number {
    return this.files.size;
  }

  /**
   * Opens `path` under `handleId`. The id and the cap are checked before the file is touched,
   * so a refused open never truncates anything (Codex truncates first in `replace` mode).
   */
  async openFile(handleId: string, path: NativePath, mode: FsOpenMode): Promise<void> {
    await this.files.add(handleId, async () => {
      this.serverWide.take();
      try {
        const file = mode === 'replace' ? await openForReplace(path) : await openForRead(path);
        if (this.closed) {
          await file.close();
          throw unknownHandle(handleId);
        }
        return { file, mode };
      } catch (err) {
        this.serverWide.give();
        throw err;
      }
    });
  }

  async readBlock(handleId: string, offset: number, len: number): Promise<{ bytes: Buffer; eof: boolean }> {
    checkHandleId(handleId);
    checkBlockLength(len, 'read');
    const { file } = this.files.get(handleId);
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
    const entry = this.files.get(handleId);
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
    const { written } = this.files.get(handleId);
    return written ? writeIds.filter((id) => written.has(id)) : [];
  }

  /** Closing an unknown (or already closed) handle succeeds, as in Codex. */
  async close(handleId: string): Promise<void> {
    const entry = this.files.find(handleId);
    this.files.delete(handleId);
    if (!entry) return;
    this.serverWide.give();
    await entry.file.close();
  }

  /** The owner is gone: every handle is closed and no new one opens. */
  async closeAll(): Promise<void> {
    this.closed = true;
    const files = this.files.clear();
    for (let i = 0; i < files.length; i++) this.serverWide.give();
    await Promise.all(files.map(({ file }) => file.close().catch(() => {})));
  }
}
