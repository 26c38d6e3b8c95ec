/**
 * Changes to the tree: `fs/createDirectory`, `fs/remove`, `fs/copy`, with Codex's defaults
 * and texts. Copying follows Codex: files are copied (mode kept, an existing file
 * overwritten), links are recreated as links, directories are merged into the destination
 * recursively; other kinds are refused. One difference: copying a file onto itself leaves it
 * intact (Codex truncates it to empty and reports success).
 *
 * File data is copied by a loop of our own, in blocks, until read() says end of file: never
 * `copyFile` (libuv's copy trusts st_size, and a /sys file that says 4096 with 18 bytes there,
 * or a source truncated while copied, spins a thread-pool thread forever, starving every other
 * session's fs and DNS and keeping the process from exiting). Each block is its own short
 * thread-pool request, and the whole copy has a deadline.
 */
import { constants } from 'node:fs';
import { lstat, mkdir, open, opendir, readlink, realpath, rm, rmdir, symlink, unlink, type FileHandle } from 'node:fs/promises';
import { dirname } from 'node:path';
import { internalError, invalidRequest } from '../../../protocol/index.js';
import { notAFile, joinPath } from '../../fs/index.js';
import type { NativePath } from '../../backend/index.js';

/** How long one fs/copy may run (10 minutes); past it the copy stops with an error. */
export const COPY_DEADLINE_MS = 10 * 60 * 1000;
/** Bytes read and written at a time (one buffer per copy in flight). */
export const COPY_BLOCK_BYTES = 64 * 1024;

export interface CopyOptions {
  /** Milliseconds the whole copy may take (default COPY_DEADLINE_MS). */
  deadlineMs?: number;
  /** The clock (tests inject one). */
  now?: () => number;
}

/** The deadline of one copy: `check()` throws once it has passed. */
class Deadline {
  private readonly end: number;
  constructor(
    private readonly ms: number,
    private readonly now: () => number,
  ) {
    this.end = now() + ms;
  }
  check(): void {
    if (this.now() > this.end) throw internalError(`fs/copy did not finish within ${Math.round(this.ms / 1000)} s and was stopped (a source that keeps growing?)`);
  }
}

export async function createDirectory(path: NativePath, recursive: boolean): Promise<void> {
  await mkdir(path.bytes, { recursive });
}

export async function remove(path: NativePath, recursive: boolean, force: boolean): Promise<void> {
  let info;
  try {
    info = await lstat(path.bytes);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT' && force) return;
    throw err;
  }
  if (!info.isDirectory()) await unlink(path.bytes);
  else if (recursive) await rm(path.bytes, { recursive: true, force: false, maxRetries: 0 });
  else await rmdir(path.bytes);
}

export async function copy(source: NativePath, destination: NativePath, recursive: boolean, options: CopyOptions = {}): Promise<void> {
  const deadline = new Deadline(options.deadlineMs ?? COPY_DEADLINE_MS, options.now ?? Date.now);
  const info = await lstat(source.bytes);
  if (info.isDirectory()) {
    if (!recursive) throw invalidRequest('fs/copy requires recursive: true when sourcePath is a directory');
    if (await isSameOrInside(source.bytes, destination.bytes)) {
      throw invalidRequest('fs/copy cannot copy a directory to itself or one of its descendants');
    }
    await copyDirectory(source.bytes, destination.bytes, deadline);
  } else if (info.isSymbolicLink()) {
    await copyLink(source.bytes, destination.bytes);
  } else if (info.isFile()) {
    await copyFileData(source.bytes, destination.bytes, deadline, source.display);
  } else {
    throw invalidRequest('fs/copy only supports regular files, directories, and symlinks');
  }
}

async function copyLink(source: Buffer, destination: Buffer): Promise<void> {
  await symlink(await readlink(source, { encoding: 'buffer' }), destination);
}

/** Depth-first, each directory streamed: memory is bounded by the tree's depth, not its size. */
async function copyDirectory(source: Buffer, destination: Buffer, deadline: Deadline): Promise<void> {
  deadline.check();
  await mkdir(destination, { recursive: true });
  const dir = await opendir(source as unknown as string, { encoding: 'buffer' as BufferEncoding, bufferSize: 64 });
  for await (const entry of dir) {
    const name = entry.name as unknown as Buffer;
    const from = joinPath(source, name);
    const to = joinPath(destination, name);
    const kind = entry.isFile() || entry.isDirectory() || entry.isSymbolicLink() ? entry : await lstat(from);
    if (kind.isDirectory()) await copyDirectory(from, to, deadline);
    else if (kind.isFile()) await copyFileData(from, to, deadline, from.toString());
    else if (kind.isSymbolicLink()) await copyLink(from, to);
  }
}

/**
 * Copies a regular file's bytes as libuv's copyfile does (destination created with the
 * source's mode, a file copied onto itself left intact, an existing one truncated and given
 * the source's mode), but in blocks until end of file, whatever the source's size says.
 */
async function copyFileData(source: Buffer, destination: Buffer, deadline: Deadline, display: string): Promise<void> {
  const from = await open(source, constants.O_RDONLY | constants.O_NONBLOCK);
  try {
    const info = await from.stat();
    if (!info.isFile()) throw notAFile(display); // replaced by something else since it was looked at
    let to: FileHandle;
    try {
      to = await open(destination, constants.O_WRONLY | constants.O_CREAT | constants.O_NONBLOCK, info.mode & 0o7777);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENXIO') throw invalidRequest('fs/copy cannot copy onto a FIFO'); // nobody reads it
      throw err;
    }
    try {
      const target = await to.stat();
      if (target.dev === info.dev && target.ino === info.ino) return; // onto itself: intact
      if (target.isFIFO() || target.isSocket()) throw invalidRequest('fs/copy cannot copy onto a FIFO or a socket');
      if (target.isFile()) await to.truncate(0);
      await to.chmod(info.mode & 0o7777).catch((err: NodeJS.ErrnoException) => {
        if (err.code !== 'EPERM') throw err; // some filesystems refuse modes; libuv goes on too
      });
      const buffer = Buffer.allocUnsafe(COPY_BLOCK_BYTES);
      for (;;) {
        deadline.check();
        const { bytesRead } = await from.read(buffer, 0, buffer.length, null);
        if (bytesRead === 0) return;
        let written = 0;
        while (written < bytesRead) {
          const { bytesWritten } = await to.write(buffer, written, bytesRead - written, null);
          if (bytesWritten === 0) throw internalError('fs/copy could not write to the destination');
          written += bytesWritten;
        }
      }
    } finally {
      await to.close();
    }
  } finally {
    await from.close();
  }
}

/** Is `destination` (resolved as far as it exists) `source` itself or below it? */
async function isSameOrInside(source: Buffer, destination: Buffer): Promise<boolean> {
  const real = (await realpath(source, { encoding: 'buffer' })).toString('latin1');
  const target = (await resolveExisting(destination)).toString('latin1');
  return target === real || target.startsWith(real.endsWith('/') ? real : `${real}/`);
}

/** The realpath of the longest existing prefix of `path`, with the rest appended. */
async function resolveExisting(path: Buffer): Promise<Buffer> {
  const rest: string[] = [];
  let current = path.toString('latin1');
  for (;;) {
    try {
      const real = await realpath(Buffer.from(current, 'latin1'), { encoding: 'buffer' });
      return rest.length === 0 ? real : Buffer.concat([real, Buffer.from(`/${rest.reverse().join('/')}`, 'latin1')]);
    } catch (err) {
      const parent = dirname(current);
      if (parent === current || (err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      rest.push(current.slice(parent.length + (parent.endsWith('/') ? 0 : 1)));
      current = parent;
    }
  }
}
