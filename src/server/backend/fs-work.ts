/**
 * The filesystem side of a back-end (backend.ts): what the fs method handlers ask of it.
 */
import type { FsDirectoryEntry, FsMetadata, FsOpenMode, FsWalkOptions, FsWalkResult } from '../../protocol/index.js';
import type { FsScope } from '../fs/scope.js';
import type { NativePath } from '../fs/uri.js';

/** A path the client named: its `file:` URI as sent (checked) and the native path it stands for. */
export interface FsTarget {
  readonly uri: string;
  readonly path: NativePath;
}

/**
 * The filesystem work of one session. Errors are the wire's (`RpcError` with Codex's codes
 * and texts). `scope` is where the client's handles and missing-watch live (per connection,
 * or per session with `fsResume`): a back-end may keep its own state there or elsewhere.
 */
export interface FsWork {
  /** The whole file, at most `maxBytes`; `reserve` takes its bytes from the budget before they are held. */
  readFile(target: FsTarget, maxBytes: number, reserve: (bytes: number) => Promise<() => void>): Promise<{ data: Buffer; release: () => void }>;
  writeFile(target: FsTarget, data: Buffer): Promise<void>;
  createDirectory(target: FsTarget, recursive: boolean): Promise<void>;
  getMetadata(target: FsTarget): Promise<FsMetadata>;
  readDirectory(target: FsTarget, maxEntries: number): Promise<FsDirectoryEntry[]>;
  /** The canonical path as a native path string (the answer's `path`). */
  canonicalize(target: FsTarget): Promise<string>;
  walk(target: FsTarget, options: FsWalkOptions): Promise<FsWalkResult>;
  remove(target: FsTarget, recursive: boolean, force: boolean): Promise<void>;
  copy(source: FsTarget, destination: FsTarget, recursive: boolean): Promise<void>;
  openFile(scope: FsScope, handleId: string, target: FsTarget, mode: FsOpenMode): Promise<void>;
  readBlock(scope: FsScope, handleId: string, offset: number, len: number): Promise<{ bytes: Buffer; eof: boolean }>;
  /** `writeId` (extension `fsWritten`): remembered once written, for `completedWrites`. */
  writeBlock(scope: FsScope, handleId: string, offset: number, data: Buffer, writeId?: number): Promise<void>;
  completedWrites(scope: FsScope, handleId: string, writeIds: number[]): number[] | Promise<number[]>;
  closeFile(scope: FsScope, handleId: string): Promise<void>;
  /** Replaces the scope's watch; true if it is now watching. Changes are told through `scope.tell`. */
  watchMissing(scope: FsScope, watchId: number, missing: FsTarget[], present: FsTarget | null): Promise<boolean>;
}
