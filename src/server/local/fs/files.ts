/**
 * Whole-file reads and writes (`fs/readFile`, `fs/writeFile`). Files are opened without
 * blocking (O_NONBLOCK) and checked before anything is read or written, so a FIFO or a
 * device can neither hang a request (Codex's writeFile to a FIFO never returns) nor feed it
 * endless data; a read is capped and answers with an error that points at fs/open.
 */
import { constants } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import { invalidRequest, type RpcError } from '../../../protocol/index.js';
import { errnoError, notAFile } from '../../fs/index.js';
import type { NativePath } from '../../backend/index.js';

const READ_FLAGS = constants.O_RDONLY | constants.O_NONBLOCK;
const REPLACE_FLAGS = constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NONBLOCK;

export function tooLarge(limit: number): RpcError {
  return invalidRequest(
    `file is too large to read: limit is ${limit} bytes; read it in blocks with fs/open and fs/readBlock`,
  );
}

/** Opens a regular file for reading; anything else is "not a file" (Codex's text). */
export async function openForRead(path: NativePath): Promise<FileHandle> {
  const handle = await open(path.bytes, READ_FLAGS);
  try {
    const stat = await handle.stat();
    if (!stat.isFile()) throw notAFile(path.display);
    return handle;
  } catch (err) {
    await handle.close();
    throw err;
  }
}

/**
 * Opens for replacement (create or truncate). A FIFO would block until a reader comes (and
 * hold a thread-pool thread meanwhile); it is refused as not a file. Devices such as
 * /dev/null are allowed, as in Codex.
 */
export async function openForReplace(path: NativePath): Promise<FileHandle> {
  let handle: FileHandle;
  try {
    handle = await open(path.bytes, REPLACE_FLAGS, 0o666);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENXIO') throw notAFile(path.display); // a FIFO nobody reads
    throw err;
  }
  try {
    const stat = await handle.stat();
    if (stat.isFIFO() || stat.isSocket()) throw notAFile(path.display);
    return handle;
  } catch (err) {
    await handle.close();
    throw err;
  }
}

/**
 * Reads a whole regular file of at most `limit` bytes. The size is checked before reading and
 * again while reading (files in /proc say 0; a file may grow), so memory never exceeds the
 * limit. The bytes are reserved from `reserve` (the server's budget) before reading; the
 * caller gives them back with `release` once the answer is built.
 */
export async function readWholeFile(
  path: NativePath,
  limit: number,
  reserve: (bytes: number) => Promise<() => void>,
): Promise<{ data: Buffer; release: () => void }> {
  const handle = await openForRead(path);
  try {
    const { size } = await handle.stat();
    if (size > limit) throw tooLarge(limit);
    const release = await reserve(size > 0 ? size : limit);
    try {
      const chunks: Buffer[] = [];
      let total = 0;
      for (;;) {
        const want = Math.min(Math.max(size - total, 64 * 1024), limit + 1 - total);
        if (want <= 0) throw tooLarge(limit);
        const buffer = Buffer.allocUnsafe(want);
        const { bytesRead } = await handle.read(buffer, 0, want, null);
        if (bytesRead === 0) break;
        chunks.push(bytesRead === want ? buffer : buffer.subarray(0, bytesRead));
        total += bytesRead;
        if (total > limit) throw tooLarge(limit);
      }
      return { data: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, total), release };
    } catch (err) {
      release();
      throw err;
    }
  } finally {
    await handle.close();
  }
}

/** Writes `data` as the whole content of the file at `path` (created if missing). */
export async function writeWholeFile(path: NativePath, data: Buffer): Promise<void> {
  const handle = await openForReplace(path);
  try {
    let offset = 0;
    while (offset < data.length) {
      const { bytesWritten } = await handle.write(data, offset, data.length - offset, null);
      if (bytesWritten === 0) throw errnoError('EIO');
      offset += bytesWritten;
    }
  } finally {
    await handle.close();
  }
}
