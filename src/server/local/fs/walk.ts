/**
 * `fs/walk`: a breadth-first listing under a directory, with Codex's exact rules (checked
 * against the binary, docs/protocol.md):
 * - each directory's names are sorted by bytes; the root itself is not listed;
 * - `maxEntries` counts every directory entry looked at (links and FIFOs too, listed or not);
 *   reaching it with entries left sets `truncated`;
 * - `maxDirectories` counts directories read, the root included; a directory left unread
 *   because of it sets `truncated`; `maxDepth` 0 lists the root's entries only and never
 *   truncates;
 * - only files and directories are listed; links are skipped unless
 *   `followDirectorySymlinks`, and then only links to directories are listed (as
 *   directories) and walked, each real directory once (the first path in walk order wins);
 * - a directory that cannot be read is reported in `errors` and the walk goes on.
 */
import type { Dirent } from 'node:fs';
import { lstat, opendir, realpath, stat } from 'node:fs/promises';
import type { FsWalkOptions, FsWalkResult } from '../../../protocol/index.js';
import { osErrorMessage } from '../../../util/os-error.js';
import { joinPath, pathToUri, checkWalkLimits } from '../../fs/index.js';
import type { NativePath } from '../../backend/index.js';

export async function walk(root: NativePath, options: FsWalkOptions): Promise<FsWalkResult> {
  checkWalkLimits(options);
  const result: FsWalkResult = { entries: [], errors: [], truncated: false };
  const rootTarget = await stat(root.bytes); // a missing or dangling root is an error
  if (!rootTarget.isDirectory()) return result;
  if ((await lstat(root.bytes)).isSymbolicLink() && !options.followDirectorySymlinks) return result;

  const visited = new Set<string>([(await realpath(root.bytes, { encoding: 'buffer' })).toString('latin1')]);
  const queue: Array<{ path: Buffer; depth: number }> = [{ path: root.bytes, depth: 0 }];
  let directoriesRead = 0;
  let entriesSeen = 0;

  for (let next = queue.shift(); next; next = queue.shift()) {
    if (directoriesRead >= options.maxDirectories) {
      result.truncated = true;
      break;
    }
    directoriesRead++;
    let names: Array<{ name: Buffer; dirent: Dirent }>;
    try {
      // Only the names that can still be looked at are kept (memory stays bounded by maxEntries).
      names = await smallestNames(next.path, options.maxEntries - entriesSeen + 1);
    } catch (err) {
      result.errors.push({ path: pathToUri(next.path), message: osErrorMessage(err) });
      continue;
    }
    for (const { name, dirent } of names) {
      if (entriesSeen >= options.maxEntries) {
        result.truncated = true;
        return result;
      }
      entriesSeen++;
      const path = joinPath(next.path, name);
      const kind = await kindOf(dirent, path);
      let isDirectory = kind === 'directory';
      if (kind === 'symlink') {
        if (!options.followDirectorySymlinks) continue;
        try {
          isDirectory = (await stat(path)).isDirectory();
        } catch {
          continue; // dangling
        }
        if (!isDirectory) continue;
      } else if (kind === 'other') {
        continue; // FIFOs, sockets, devices
      }
      result.entries.push({ path: pathToUri(path), kind: isDirectory ? 'directory' : 'file' });
      if (!isDirectory || next.depth >= options.maxDepth) continue;
      if (options.followDirectorySymlinks) {
        let real: string;
        try {
          real = (await realpath(path, { encoding: 'buffer' })).toString('latin1');
        } catch {
          continue;
        }
        if (visited.has(real)) continue;
        visited.add(real);
      }
      queue.push({ path, depth: next.depth + 1 });
    }
  }
  return result;
}

/** The `count` smallest names of a directory, sorted by bytes, read in one streaming pass. */
async function smallestNames(path: Buffer, count: number): Promise<Array<{ name: Buffer; dirent: Dirent }>> {
  const dir = await opendir(path as unknown as string, { encoding: 'buffer' as BufferEncoding, bufferSize: 256 });
  const byName = (a: { name: Buffer }, b: { name: Buffer }) => Buffer.compare(a.name, b.name);
  let names: Array<{ name: Buffer; dirent: Dirent }> = [];
  for await (const dirent of dir) {
    names.push({ name: dirent.name as unknown as Buffer, dirent });
    if (names.length >= 2 * count + 1024) names = names.sort(byName).slice(0, count);
  }
  return names.sort(byName).slice(0, count);
}

/** The kind of a directory entry; `lstat` when the OS did not say (DT_UNKNOWN on some filesystems). */
async function kindOf(dirent: Dirent, path: Buffer): Promise<'file' | 'directory' | 'symlink' | 'other'> {
  let info: { isFile(): boolean; isDirectory(): boolean; isSymbolicLink(): boolean } = dirent;
  const known = dirent.isFile() || dirent.isDirectory() || dirent.isSymbolicLink() || dirent.isFIFO() || dirent.isSocket() || dirent.isCharacterDevice() || dirent.isBlockDevice();
  if (!known) {
    try {
      info = await lstat(path);
    } catch {
      return 'other';
    }
  }
  if (info.isSymbolicLink()) return 'symlink';
  if (info.isDirectory()) return 'directory';
  return info.isFile() ? 'file' : 'other';
}
