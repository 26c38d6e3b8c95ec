/**
 * The filesystem method family's names and Codex's limits (schemas and result types: fs.ts).
 * Kept free of zod: the client imports this, and `tether exec`/`tether cp` should not load
 * the server's validation library at every start.
 */
export const FsMethod = {
  readFile: 'fs/readFile',
  writeFile: 'fs/writeFile',
  createDirectory: 'fs/createDirectory',
  getMetadata: 'fs/getMetadata',
  readDirectory: 'fs/readDirectory',
  canonicalize: 'fs/canonicalize',
  walk: 'fs/walk',
  remove: 'fs/remove',
  copy: 'fs/copy',
  open: 'fs/open',
  readBlock: 'fs/readBlock',
  writeBlock: 'fs/writeBlock',
  close: 'fs/close',
  /** Extension `fsWritten`: which of a handle's numbered block writes completed. */
  written: 'fs/written',
  watchMissing: 'fs/watchMissing',
  /** Notification: the state a `fs/watchMissing` watched changed. */
  missingChanged: 'fs/missingChanged',
  environmentConfigRead: 'environmentConfig/read',
} as const;

/** Codex's limits, which both servers enforce the same way. */
export const FsLimits = {
  /** fs/readBlock `len` and fs/writeBlock chunk size: 1..1 MiB. */
  maxBlockBytes: 1024 * 1024,
  /** Longest `handleId` (bytes). */
  maxHandleIdBytes: 32,
  /** Open handles per connection (Codex); per session on tether. */
  maxHandles: 128,
  /** Extension `fsWritten`: ids one fs/written may ask about, and completed ids a handle remembers. */
  maxWriteIds: 256,
  /** fs/walk option maximums. */
  walkMaxDepth: 64,
  walkMaxDirectories: 10_000,
  walkMaxEntries: 50_000,
} as const;
