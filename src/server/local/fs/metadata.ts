/**
 * What is at a path: `fs/getMetadata` (follows links, and says whether the path itself is
 * one), `fs/canonicalize` (realpath) and `fs/readDirectory` (entries in the directory's own
 * order, links followed, entries whose target cannot be read left out, as Codex does).
 */
import type { BigIntStats } from 'node:fs';
import { lstat, opendir, realpath, stat } from 'node:fs/promises';
import { invalidRequest, type FsDirectoryEntry, type FsMetadata } from '../../../protocol/index.js';
import { joinPath, pathToUri } from '../../fs/index.js';
import type { NativePath } from '../../backend/index.js';

export async function getMetadata(path: NativePath): Promise<FsMetadata> {
  const target = await stat(path.bytes, { bigint: true });
  const self = await lstat(path.bytes, { bigint: true });
  return {
    isDirectory: target.isDirectory(),
    isFile: target.isFile(),
    isSymlink: self.isSymbolicLink(),
    size: Number(target.size),
    // tether reports the real birth time where the filesystem keeps one; Codex's musl build always says 0.
    createdAtMs: millis(target.birthtimeNs),
    modifiedAtMs: millis(target.mtimeNs),
  };
}

/** Whole milliseconds since the epoch, truncated (Rust's Duration::as_millis), exact from nanoseconds. */
function millis(ns: BigIntStats['mtimeNs']): number {
  return ns > 0n ? Number(ns / 1_000_000n) : 0;
}

export async function canonicalize(path: NativePath): Promise<string> {
  return pathToUri(await realpath(path.bytes, { encoding: 'buffer' }));
}

/**
 * Lists a directory, streaming, and refuses one with more than `maxEntries` entries rather
 * than building an answer of unbounded size.
 */
export async function readDirectory(path: NativePath, maxEntries: number): Promise<FsDirectoryEntry[]> {
  const dir = await opendir(path.bytes as unknown as string, { encoding: 'buffer' as BufferEncoding, bufferSize: 256 });
  const entries: FsDirectoryEntry[] = [];
  try {
    for (;;) {
      const entry = await dir.read();
      if (!entry) break;
      const name = entry.name as unknown as Buffer;
      let target;
      try {
        target = await stat(joinPath(path.bytes, name));
      } catch {
        continue; // a dangling link, or an entry removed meanwhile
      }
      if (entries.length >= maxEntries) {
        throw invalidRequest(
          `directory \`${path.display}\` has more than ${maxEntries} entries; list it in pieces with fs/walk (maxEntries)`,
        );
      }
      entries.push({ fileName: name.toString('utf8'), isDirectory: target.isDirectory(), isFile: target.isFile() });
    }
  } finally {
    await dir.close().catch(() => {});
  }
  return entries;
}
