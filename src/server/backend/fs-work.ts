/**
 * The filesystem side of a back-end (backend.ts): what the fs method handlers ask of it, and
 * the types it owns: native paths, the scope a client's handles and missing-watch live in
 * (fs/scope.ts implements it), and what a session record keeps of a scope's state.
 */
import type { FsDirectoryEntry, FsMetadata, FsOpenMode, FsWalkOptions, FsWalkResult } from '../../protocol/index.js';

/** A path as the OS names it (server/fs/uri.ts makes them from `file:` URIs). */
export interface NativePath {
  /** The path as bytes, for Node's fs functions. */
  bytes: Buffer;
  /** Lossy UTF-8, for messages (Rust's Path::display). */
  display: string;
}

/** A path the client named: its `file:` URI as sent (checked) and the native path it stands for. */
export interface FsTarget {
  readonly uri: string;
  readonly path: NativePath;
}

/** File handles open across the whole server: a slot is taken per open handle (or refused with the limit's error). */
export interface OpenFileSlots {
  take(): void;
  give(): void;
}

export interface FsScopeLimits {
  maxHandles: number;
  /** Handles open across the server (shared by every scope). */
  openFiles: OpenFileSlots;
}

/**
 * Where a client's file handles and missing-watch live: per connection (Codex's rule), or
 * per session with `fsResume`. A back-end keeps its own state for a scope there
 * (`FsWork.openScope`) or elsewhere, keyed by the scope and dropped `onClose`.
 */
export interface FsScope {
  readonly limits: FsScopeLimits;
  /** Tells the client that watch `watchId` saw a change (`fs/missingChanged`); nothing once the scope closed. */
  tell(watchId: number): void;
  /** What the back-end's state `kept()` returns changed (a watch armed, told or replaced; a handle opened or closed). */
  keptChanged(): void;
  /** Runs `listener` once when the scope closes (a back-end's own per-scope state). */
  onClose(listener: () => void): void;
}

/** A missing-watch as a session record keeps it. */
export interface KeptWatchRecord {
  watchId: number;
  /** base64 of each missing path's bytes. */
  missing: string[];
  /** base64 of the present path's bytes, or null. */
  present: string | null;
}

/**
 * The fs part of a session record (restart adoption): what a successor server needs of an
 * `fsResume` session's scope (fs/kept-fs.ts checks and converts it).
 */
export interface KeptFsRecord {
  /** The watch armed and not yet told to the client; absent when none. */
  watch?: KeptWatchRecord;
  /** Ids of the file handles open (or lost in an earlier restart and not closed yet); absent when none. */
  handles?: string[];
}

/** A back-end's own state in one scope (its handles, its watch), as a session record keeps it. */
export interface FsScopeState {
  /** What a successor server needs of this scope. */
  kept(): KeptFsRecord;
  /** Watch `watchId`'s change reached the client: a successor need not tell it again. */
  told(watchId: number): void;
  /** A successor server (restart adoption): what the predecessor's scope kept. */
  restore(record: KeptFsRecord): void;
  /** The scope closed: every handle is closed and the watch stops. */
  close(): Promise<void>;
}

/**
 * The filesystem work of one session. Errors are the wire's (`RpcError` with Codex's codes
 * and texts). `scope` is where the client's handles and missing-watch live (per connection,
 * or per session with `fsResume`): a back-end may keep its own state there or elsewhere.
 */
export interface FsWork {
  /**
   * A new scope: the back-end's own state in it, which a session record keeps and a successor
   * restores (the local back-end: open files and the watch). Absent when it keeps none there.
   */
  openScope?(scope: FsScope): FsScopeState;
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
