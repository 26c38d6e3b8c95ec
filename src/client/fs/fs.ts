/**
 * `client.fs`: the remote host's filesystem in the shape of `node:fs/promises`, so a
 * TypeScript agent can use a tether host (or a Codex exec-server) as its workspace:
 *
 *   const text = await client.fs.readFile('src/index.ts', 'utf8');
 *   await client.fs.writeFile('/srv/app/config.json', JSON.stringify(config));
 *   for (const entry of await client.fs.readdir('.', { withFileTypes: true })) …
 *
 * Paths are absolute paths, `file:` URLs (strings or URL objects), or paths relative to the
 * server's working directory. Errors carry Node's `code` ('ENOENT', 'EISDIR', 'EEXIST'…).
 * Through drops every call completes exactly once: reads are re-sent, changes carry an
 * idempotency key (tether's `fsResume`), and on a server without it a change whose answer was
 * lost fails with `OutcomeUnknownError` instead of being silently repeated (fs-requests.ts).
 */
import type { Readable, Writable } from 'node:stream';
import { fileURLToPath, pathToFileURL } from 'node:url';
// The protocol one module at a time: the barrel would load the server's zod schemas.
import { Base64Text } from '../../protocol/dialect.js';
import { FsMethod } from '../../protocol/fs-methods.js';
import type {
  EnvironmentConfigReadResult,
  FsMetadata,
  FsReadDirectoryResult,
  FsReadFileResult,
  FsWalkResult,
  FsWatchMissingResult,
} from '../../protocol/fs.js';
import { RemoteFileHandle, readBlocks, readStream, writeStream } from './files.js';
import { RemoteFsError } from './errors.js';
import { FsRequests, type FsHost } from './requests.js';

export { RemoteFileHandle } from './files.js';
export { RemoteFsError, OutcomeUnknownError } from './errors.js';
export type { FsHost } from './requests.js';

export type PathLike = string | URL;

/** Whole files up to this size go in one fs/readFile or fs/writeFile; larger ones in blocks. */
const WHOLE_FILE_BYTES = 8 * 1024 * 1024;

/** `fs.Stats` in small (from fs/getMetadata, which follows links). */
export interface RemoteStats {
  size: number;
  mtimeMs: number;
  mtime: Date;
  /** 0 / the epoch where the server cannot tell (Codex always). */
  birthtimeMs: number;
  birthtime: Date;
  isFile(): boolean;
  isDirectory(): boolean;
  /** Whether the path itself is a link (the rest describes its target). */
  isSymbolicLink(): boolean;
}

/** `fs.Dirent` in small (fs/readDirectory follows links). */
export interface RemoteDirent {
  name: string;
  parentPath: string;
  isFile(): boolean;
  isDirectory(): boolean;
}

export interface WalkOptions {
  maxDepth?: number;
  maxDirectories?: number;
  maxEntries?: number;
  followDirectorySymlinks?: boolean;
}

export interface WalkResult {
  entries: Array<{ path: string; kind: 'file' | 'directory' }>;
  errors: Array<{ path: string; message: string }>;
  truncated: boolean;
}

type Encoding = BufferEncoding;

export class RemoteFs {
  private readonly requests: FsRequests;
  private nextWatchId = 1;
  private watch: { settle: (changed: boolean, error?: Error) => void; watchId: number; missing: string[]; present: string | null } | null = null;

  constructor(host: FsHost) {
    this.requests = new FsRequests(host);
    // The watch of a drop: the server may have lost it (Codex) or its notification: look again.
    host.onRecovered(() => void this.recheckWatch());
    host.onMissingChanged((watchId) => {
      if (this.watch?.watchId === watchId) this.watch.settle(true);
    });
  }

  readFile(path: PathLike): Promise<Buffer>;
  readFile(path: PathLike, options: Encoding | { encoding: Encoding }): Promise<string>;
  readFile(path: PathLike, options?: { encoding?: null }): Promise<Buffer>;
  async readFile(path: PathLike, options?: Encoding | { encoding?: Encoding | null }): Promise<Buffer | string> {
    const encoding = typeof options === 'string' ? options : (options?.encoding ?? null);
    const { uri, native } = await this.resolve(path);
    let data: Buffer | undefined;
    // tether caps fs/readFile and says so; a Codex server does not (512 MiB in one message), so ask the size first there.
    const wholeFile = this.requests.resumable || (await this.metadata(uri, native, 'open')).size <= WHOLE_FILE_BYTES;
    if (wholeFile) {
      try {
        const result = await this.requests.read<FsReadFileResult>(FsMethod.readFile, { path: uri }, 'open', native);
        data = Buffer.from(result.dataBase64, 'base64');
      } catch (err) {
        if ((err as RemoteFsError).code !== 'EFBIG') throw err;
      }
    }
    if (!data) {
      const handle = await RemoteFileHandle.open(this.requests, uri, native, 'read');
      try {
        const parts: Buffer[] = [];
        for await (const block of readBlocks(handle)) parts.push(block);
        data = Buffer.concat(parts);
      } finally {
        await handle.close().catch(() => {});
      }
    }
    return encoding ? data.toString(encoding) : data;
  }

  /** Replaces the file's content. Large data goes in blocks (fs/open replace + fs/writeBlock). */
  async writeFile(path: PathLike, data: string | Uint8Array, options?: Encoding | { encoding?: Encoding }): Promise<void> {
    const encoding = typeof options === 'string' ? options : (options?.encoding ?? 'utf8');
    const bytes = typeof data === 'string' ? Buffer.from(data, encoding) : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    const { uri, native } = await this.resolve(path);
    if (bytes.length <= WHOLE_FILE_BYTES) {
      await this.requests.mutate(FsMethod.writeFile, { path: uri, dataBase64: new Base64Text(bytes.toString('base64')) }, 'open', native);
      return;
    }
    const handle = await RemoteFileHandle.open(this.requests, uri, native, 'replace');
    try {
      await handle.write(bytes, 0, bytes.length, 0);
    } finally {
      await handle.close();
    }
  }

  /** Node's defaults: not recursive (fs/createDirectory's default is recursive; tether sends it explicitly). */
  async mkdir(path: PathLike, options?: { recursive?: boolean }): Promise<void> {
    const { uri, native } = await this.resolve(path);
    await this.requests.mutate(FsMethod.createDirectory, { path: uri, recursive: options?.recursive ?? false }, 'mkdir', native);
  }

  readdir(path: PathLike, options?: { withFileTypes?: false }): Promise<string[]>;
  readdir(path: PathLike, options: { withFileTypes: true }): Promise<RemoteDirent[]>;
  async readdir(path: PathLike, options?: { withFileTypes?: boolean }): Promise<string[] | RemoteDirent[]> {
    const { uri, native } = await this.resolve(path);
    const { entries } = await this.requests.read<FsReadDirectoryResult>(FsMethod.readDirectory, { path: uri }, 'scandir', native);
    // Sorted, as Node's readdir returns them (servers answer in the directory's own order).
    const sorted = [...entries].sort((a, b) => (a.fileName < b.fileName ? -1 : a.fileName > b.fileName ? 1 : 0));
    if (!options?.withFileTypes) return sorted.map((e) => e.fileName);
    return sorted.map((e) => ({ name: e.fileName, parentPath: native, isFile: () => e.isFile, isDirectory: () => e.isDirectory }));
  }

  async stat(path: PathLike): Promise<RemoteStats> {
    const { uri, native } = await this.resolve(path);
    const m = await this.metadata(uri, native, 'stat');
    return {
      size: m.size,
      mtimeMs: m.modifiedAtMs,
      mtime: new Date(m.modifiedAtMs),
      birthtimeMs: m.createdAtMs,
      birthtime: new Date(m.createdAtMs),
      isFile: () => m.isFile,
      isDirectory: () => m.isDirectory,
      isSymbolicLink: () => m.isSymlink,
    };
  }

  private metadata(uri: string, native: string, syscall: string): Promise<FsMetadata> {
    return this.requests.read<FsMetadata>(FsMethod.getMetadata, { path: uri }, syscall, native);
  }

  /** Resolves to true if the path exists (following links). */
  async exists(path: PathLike): Promise<boolean> {
    try {
      await this.stat(path);
      return true;
    } catch (err) {
      if ((err as RemoteFsError).code === 'ENOENT') return false;
      throw err;
    }
  }

  async realpath(path: PathLike): Promise<string> {
    const { uri, native } = await this.resolve(path);
    const result = await this.requests.read<{ path: string }>(FsMethod.canonicalize, { path: uri }, 'realpath', native);
    return fileURLToPath(result.path);
  }

  /** Node's defaults: neither recursive nor forced (fs/remove defaults to both; tether sends them explicitly). */
  async rm(path: PathLike, options?: { recursive?: boolean; force?: boolean }): Promise<void> {
    const { uri, native } = await this.resolve(path);
    await this.requests.mutate(FsMethod.remove, { path: uri, recursive: options?.recursive ?? false, force: options?.force ?? false }, 'rm', native);
  }

  /** Copies on the remote host (files, links as links, directories with `recursive`). */
  async cp(source: PathLike, destination: PathLike, options?: { recursive?: boolean }): Promise<void> {
    const from = await this.resolve(source);
    const to = await this.resolve(destination);
    await this.requests.mutate(FsMethod.copy, { sourcePath: from.uri, destinationPath: to.uri, recursive: options?.recursive ?? false }, 'cp', from.native);
  }

  /** fs/walk: a breadth-first listing (Codex's rules and limits; defaults: the maximums, links not followed). */
  async walk(path: PathLike, options: WalkOptions = {}): Promise<WalkResult> {
    const { uri, native } = await this.resolve(path);
    const result = await this.requests.read<FsWalkResult>(
      FsMethod.walk,
      {
        path: uri,
        options: {
          maxDepth: options.maxDepth ?? 64,
          maxDirectories: options.maxDirectories ?? 10_000,
          maxEntries: options.maxEntries ?? 50_000,
          followDirectorySymlinks: options.followDirectorySymlinks ?? false,
        },
      },
      'walk',
      native,
    );
    return {
      entries: result.entries.map((e) => ({ path: fileURLToPath(e.path), kind: e.kind })),
      errors: result.errors.map((e) => ({ path: fileURLToPath(e.path), message: e.message })),
      truncated: result.truncated,
    };
  }

  /** A file handle: 'r' reads, 'w' replaces the file (created if missing). */
  async open(path: PathLike, flags: 'r' | 'w' = 'r'): Promise<RemoteFileHandle> {
    const { uri, native } = await this.resolve(path);
    return RemoteFileHandle.open(this.requests, uri, native, flags === 'w' ? 'replace' : 'read');
  }

  /** The file as a Readable, read in pipelined blocks that resume by offset after a drop. `end` is inclusive. */
  createReadStream(path: PathLike, options: { start?: number; end?: number } = {}): Readable {
    return readStream(() => this.open(path, 'r'), options);
  }

  /** A Writable that replaces the file, in pipelined blocks; 'finish' once everything landed. */
  createWriteStream(path: PathLike): Writable {
    return writeStream(() => this.open(path, 'w'));
  }

  /**
   * Resolves when something appears at one of `missing` (or on the way to it), or `present`
   * disappears — at once if that is already so. One watch at a time: a new call replaces the
   * previous one (which rejects with an AbortError). Survives drops: after a reconnect the
   * paths are looked at again, so a change that happened meanwhile is not missed.
   */
  async watchMissing(missing: PathLike[], options: { present?: PathLike; signal?: AbortSignal } = {}): Promise<void> {
    options.signal?.throwIfAborted();
    const paths = await Promise.all(missing.map(async (p) => (await this.resolve(p)).uri));
    const present = options.present === undefined ? null : (await this.resolve(options.present)).uri;
    this.watch?.settle(false, abortError('replaced by a newer watchMissing'));
    return new Promise<void>((resolve, reject) => {
      const watch = {
        watchId: 0,
        missing: paths,
        present,
        settle: (changed: boolean, error?: Error) => {
          if (this.watch !== watch) return;
          this.watch = null;
          options.signal?.removeEventListener('abort', onAbort);
          if (changed) resolve();
          else reject(error ?? abortError('watch ended'));
        },
      };
      const onAbort = () => {
        watch.settle(false, abortError('the watch was aborted'));
        // Clear it on the server too: an empty watch replaces it (best effort).
        void this.requests.host.requestOnce(FsMethod.watchMissing, { watchId: this.nextWatchId++, missing: [] }).catch(() => {});
      };
      options.signal?.addEventListener('abort', onAbort, { once: true });
      this.watch = watch;
      void this.arm(watch).catch((err: Error) => watch.settle(false, err));
    });
  }

  /** environmentConfig/read: the host's Codex configuration reduced to the given TOML paths. */
  async environmentConfig(configPaths: string[][], requirementsPaths: string[][] = [], cwd: PathLike = '.'): Promise<EnvironmentConfigReadResult> {
    const { uri, native } = await this.resolve(cwd);
    return this.requests.read<EnvironmentConfigReadResult>(FsMethod.environmentConfigRead, { cwd: uri, configPaths, requirementsPaths }, 'read', native);
  }

  /** Sends the watch (again) under a fresh id; `watching: false` means the state already changed. */
  private async arm(watch: NonNullable<RemoteFs['watch']>): Promise<void> {
    if (this.watch !== watch) return;
    const watchId = this.nextWatchId++;
    watch.watchId = watchId;
    const params: Record<string, unknown> = { watchId, missing: watch.missing };
    if (watch.present !== null) params.present = watch.present;
    const result = await this.requests.read<FsWatchMissingResult>(FsMethod.watchMissing, params, 'watch', watch.missing[0] ?? '');
    if (this.watch === watch && watch.watchId === watchId && !result.watching) watch.settle(true);
  }

  private async recheckWatch(): Promise<void> {
    const watch = this.watch;
    if (watch) await this.arm(watch).catch(() => {});
  }

  /** A path as the server's `file:` URI and as a native path for messages. */
  private async resolve(path: PathLike): Promise<{ uri: string; native: string }> {
    if (path instanceof URL) return { uri: path.href, native: fileURLToPath(path) };
    if (typeof path !== 'string' || path === '') throw new TypeError(`path must be a non-empty string or a file: URL (got ${JSON.stringify(path)})`);
    if (/^file:/i.test(path)) return { uri: path, native: fileURLToPath(path) };
    if (path.startsWith('/')) return { uri: pathToFileURL(path).href, native: path };
    const cwd = (await this.requests.host.environmentInfo()).cwd;
    const url = new URL(path.split('/').map(encodeURIComponent).join('/'), cwd.endsWith('/') ? cwd : `${cwd}/`);
    return { uri: url.href, native: fileURLToPath(url) };
  }
}

function abortError(message: string): Error {
  return Object.assign(new Error(message), { name: 'AbortError', code: 'ABORT_ERR' });
}
