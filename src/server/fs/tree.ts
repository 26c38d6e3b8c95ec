/**
 * Changes to the tree: `fs/createDirectory`, `fs/remove`, `fs/copy`, with Codex's defaults
 * and texts. Copying follows Codex: files are copied (mode kept, an existing file
 * overwritten), links are recreated as links, directories are merged into the destination
 * recursively; other kinds are refused. One difference: copying a file onto itself leaves it
 * intact (Codex truncates it to empty and reports success).
 */
import { copyFile, lstat, mkdir, opendir, readlink, realpath, rm, rmdir, symlink, unlink } from 'node:fs/promises';
import { dirname } from 'node:path';
import { invalidRequest } from '../../protocol/index.js';
import { joinPath, type NativePath } from './uri.js';

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

export async function copy(source: NativePath, destination: NativePath, recursive: boolean): Promise<void> {
  const info = await lstat(source.bytes);
  if (info.isDirectory()) {
    if (!recursive) throw invalidRequest('fs/copy requires recursive: true when sourcePath is a directory');
    if (await isSameOrInside(source.bytes, destination.bytes)) {
      throw invalidRequest('fs/copy cannot copy a directory to itself or one of its descendants');
    }
    await copyDirectory(source.bytes, destination.bytes);
  } else if (info.isSymbolicLink()) {
    await copyLink(source.bytes, destination.bytes);
  } else if (info.isFile()) {
    await copyFile(source.bytes, destination.bytes); // libuv keeps a file copied onto itself intact
  } else {
    throw invalidRequest('fs/copy only supports regular files, directories, and symlinks');
  }
}

async function copyLink(source: Buffer, destination: Buffer): Promise<void> {
  await symlink(await readlink(source, { encoding: 'buffer' }), destination);
}

/** Depth-first, each directory streamed: memory is bounded by the tree's depth, not its size. */
async function copyDirectory(source: Buffer, destination: Buffer): Promise<void> {
  await mkdir(destination, { recursive: true });
  const dir = await opendir(source as unknown as string, { encoding: 'buffer' as BufferEncoding, bufferSize: 64 });
  for await (const entry of dir) {
    const name = entry.name as unknown as Buffer;
    const from = joinPath(source, name);
    const to = joinPath(destination, name);
    const kind = entry.isFile() || entry.isDirectory() || entry.isSymbolicLink() ? entry : await lstat(from);
    if (kind.isDirectory()) await copyDirectory(from, to);
    else if (kind.isFile()) await copyFile(from, to);
    else if (kind.isSymbolicLink()) await copyLink(from, to);
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
