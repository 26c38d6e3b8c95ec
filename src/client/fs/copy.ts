/**
 * Copying files and directory trees between this machine and a remote host (`tether cp`),
 * with `cp -r` naming rules: into an existing directory the source keeps its name, otherwise
 * the destination is the copy. Files travel in pipelined blocks that resume by offset after a
 * drop (client.fs streams). On a server without `fsResume` a drop in the middle of an upload
 * loses the remote handle; the file is then sent again from the start (it is being replaced
 * as a whole anyway), a bounded number of times. Downloads land in a temporary file renamed
 * into place, so a failed copy never leaves a half-written file under the real name.
 * Links are not followed and not copied (the protocol cannot create them); modes are not kept.
 */
import { randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { lstat, mkdir, opendir, rename, rm, stat } from 'node:fs/promises';
import { basename, join, posix } from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { RemoteFs } from './fs.js';
import { OutcomeUnknownError, type RemoteFsError } from './errors.js';

export interface CopyReport {
  files: number;
  directories: number;
  bytes: number;
  /** Links and special files left out, with why. */
  skipped: string[];
}

export interface CopyOptions {
  /** Called for each file copied (for progress output). */
  onFile?: (path: string, bytes: number) => void;
  /** Whole-file re-sends allowed per file on a server that loses handles in a drop (default 5). */
  maxRestarts?: number;
}

const newReport = (): CopyReport => ({ files: 0, directories: 0, bytes: 0, skipped: [] });

/** Copies the local `source` (file or directory) to `destination` on the remote host. */
export async function copyToRemote(fs: RemoteFs, source: string, destination: string, options: CopyOptions = {}): Promise<CopyReport> {
  const report = newReport();
  const info = await lstat(source);
  const target = (await remoteIsDirectory(fs, destination)) ? posix.join(destination, basename(source)) : destination;
  if (info.isDirectory()) await uploadTree(fs, source, target, report, options);
  else if (info.isFile()) await uploadFile(fs, source, target, info.size, report, options);
  else throw Object.assign(new Error(`${source}: not a regular file or directory`), { code: 'EINVAL' });
  return report;
}

/** Copies `source` (file or directory) on the remote host to the local `destination`. */
export async function copyFromRemote(fs: RemoteFs, source: string, destination: string, options: CopyOptions = {}): Promise<CopyReport> {
  const report = newReport();
  const info = await fs.stat(source);
  const target = (await localIsDirectory(destination)) ? join(destination, posix.basename(source)) : destination;
  if (info.isDirectory()) await downloadTree(fs, source, target, report, options);
  else if (info.isFile()) await downloadFile(fs, source, target, report, options);
  else throw Object.assign(new Error(`${source}: not a regular file or directory on the remote host`), { code: 'EINVAL' });
  return report;
}

async function uploadTree(fs: RemoteFs, source: string, target: string, report: CopyReport, options: CopyOptions): Promise<void> {
  await fs.mkdir(target, { recursive: true });
  report.directories++;
  const dir = await opendir(source);
  for await (const entry of dir) {
    const from = join(source, entry.name);
    const to = posix.join(target, entry.name);
    if (entry.isDirectory()) await uploadTree(fs, from, to, report, options);
    else if (entry.isFile()) await uploadFile(fs, from, to, (await stat(from)).size, report, options);
    else report.skipped.push(`${from} (${entry.isSymbolicLink() ? 'a symbolic link' : 'not a regular file'})`);
  }
}

async function uploadFile(fs: RemoteFs, source: string, target: string, size: number, report: CopyReport, options: CopyOptions): Promise<void> {
  const restarts = options.maxRestarts ?? 5;
  for (let attempt = 0; ; attempt++) {
    try {
      await pipeline(createReadStream(source, { highWaterMark: 1024 * 1024 }), fs.createWriteStream(target));
      break;
    } catch (err) {
      // The server lost the handle with the connection: the file is replaced as a whole, so send it again.
      if (!(err instanceof OutcomeUnknownError) || attempt >= restarts) throw err;
    }
  }
  report.files++;
  report.bytes += size;
  options.onFile?.(target, size);
}

async function downloadTree(fs: RemoteFs, source: string, target: string, report: CopyReport, options: CopyOptions): Promise<void> {
  await mkdir(target, { recursive: true });
  report.directories++;
  // One level at a time: walk lists files and directories only (links and FIFOs are left out).
  const listing = await fs.walk(source, { maxDepth: 0, maxDirectories: 1 });
  if (listing.truncated) {
    throw Object.assign(new Error(`${source}: more entries than one listing can hold (${listing.entries.length}); copy its subdirectories one by one`), { code: 'E2BIG' });
  }
  for (const error of listing.errors) report.skipped.push(`${error.path} (${error.message})`);
  for (const entry of listing.entries) {
    const name = posix.basename(entry.path);
    if (entry.kind === 'directory') await downloadTree(fs, entry.path, join(target, name), report, options);
    else await downloadFile(fs, entry.path, join(target, name), report, options);
  }
}

async function downloadFile(fs: RemoteFs, source: string, target: string, report: CopyReport, options: CopyOptions): Promise<void> {
  const partial = `${target}.tether-partial-${randomBytes(4).toString('hex')}`;
  let bytes = 0;
  try {
    const remote = fs.createReadStream(source);
    remote.on('data', (chunk: Buffer) => (bytes += chunk.length));
    await pipeline(remote, createWriteStream(partial));
    await rename(partial, target);
  } catch (err) {
    await rm(partial, { force: true });
    throw err;
  }
  report.files++;
  report.bytes += bytes;
  options.onFile?.(target, bytes);
}

async function remoteIsDirectory(fs: RemoteFs, path: string): Promise<boolean> {
  try {
    return (await fs.stat(path)).isDirectory();
  } catch (err) {
    if ((err as RemoteFsError).code === 'ENOENT') return false;
    throw err;
  }
}

async function localIsDirectory(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isDirectory();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw err;
  }
}
