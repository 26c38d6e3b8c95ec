/**
 * The filesystem method family (`fs/*`, `environmentConfig/read`) as the Codex 0.169
 * exec-server answers it, checked against the binary (docs/protocol.md, "Filesystem").
 * Params follow Codex's serde rules: unknown members are ignored, `Option` members accept
 * null, and the defaults are Codex's (createDirectory and remove default to recursive, remove
 * to force). Paths are `file:` URIs; the server turns them into native paths (server/fs/uri.ts).
 */
import { z } from 'zod';

// The method names and limits live apart from the schemas: a client needs them without zod.
export { FsLimits, FsMethod } from './fs-methods.js';

const uri = z.string();
/**
 * Codex deserializes `sandbox` into its sandbox context; tether has no sandbox and refuses any
 * non-null value (server/fs/methods.ts), so anything is accepted here.
 */
const sandbox = z.unknown().optional();
const u64 = z.number().int().nonnegative();
const optionalBool = z.boolean().nullish();

/**
 * tether extension `fsResume`: a key that makes a mutating request exactly-once through
 * re-sends (the server answers a repeated key from its memory of recent results).
 */
const idempotencyKey = z.string().min(1, 'idempotencyKey must not be empty').max(128, 'idempotencyKey must be at most 128 characters').nullish();

export const FsPathParamsSchema = z.object({ path: uri, sandbox });

export const FsWriteFileParamsSchema = z.object({ path: uri, dataBase64: z.string(), sandbox, idempotencyKey });

export const FsCreateDirectoryParamsSchema = z.object({ path: uri, recursive: optionalBool, sandbox, idempotencyKey });

export const FsWalkOptionsSchema = z.object({
  maxDepth: u64,
  maxDirectories: u64,
  maxEntries: u64,
  followDirectorySymlinks: z.boolean(),
});

export const FsWalkParamsSchema = z.object({ path: uri, options: FsWalkOptionsSchema, sandbox });

export const FsRemoveParamsSchema = z.object({ path: uri, recursive: optionalBool, force: optionalBool, sandbox, idempotencyKey });

export const FsCopyParamsSchema = z.object({
  sourcePath: uri,
  destinationPath: uri,
  recursive: z.boolean(),
  sandbox,
  idempotencyKey,
});

export const FsOpenModeSchema = z.enum(['read', 'replace']);

export const FsOpenParamsSchema = z.object({
  handleId: z.string(),
  path: uri,
  /** Absent means "read"; unlike most optional members, Codex refuses null here. */
  mode: FsOpenModeSchema.optional(),
  sandbox,
  idempotencyKey,
});

export const FsReadBlockParamsSchema = z.object({ handleId: z.string(), offset: u64, len: u64 });

/** `writeId`: extension `fsWritten` (ignored without it, as Codex ignores unknown members). */
export const FsWriteBlockParamsSchema = z.object({ handleId: z.string(), offset: u64, chunk: z.string(), writeId: u64.nullish() });

/** Extension `fsWritten`. */
export const FsWrittenParamsSchema = z.object({ handleId: z.string(), writeIds: z.array(u64) });

export const FsCloseParamsSchema = z.object({ handleId: z.string() });

export const FsWatchMissingParamsSchema = z.object({
  watchId: u64,
  missing: z.array(uri),
  present: uri.nullish(),
});

const tomlPath = z.array(z.string());

export const EnvironmentConfigReadParamsSchema = z.object({
  cwd: uri,
  configPaths: z.array(tomlPath),
  requirementsPaths: z.array(tomlPath),
});

export type FsWalkOptions = z.infer<typeof FsWalkOptionsSchema>;
export type FsOpenMode = z.infer<typeof FsOpenModeSchema>;

export interface FsReadFileResult {
  dataBase64: string;
}

export interface FsMetadata {
  isDirectory: boolean;
  isFile: boolean;
  isSymlink: boolean;
  size: number;
  createdAtMs: number;
  modifiedAtMs: number;
}

export interface FsDirectoryEntry {
  fileName: string;
  isDirectory: boolean;
  isFile: boolean;
}

export interface FsReadDirectoryResult {
  entries: FsDirectoryEntry[];
}

export interface FsWalkEntry {
  path: string;
  kind: 'file' | 'directory';
}

export interface FsWalkResult {
  entries: FsWalkEntry[];
  errors: Array<{ path: string; message: string }>;
  truncated: boolean;
}

export interface FsReadBlockResult {
  /** base64 */
  chunk: string;
  /** Fewer bytes than asked for were read: the end of the file. */
  eof: boolean;
}

/** Extension `fsWritten`: the asked ids whose fs/writeBlock completed (in the order asked). */
export interface FsWrittenResult {
  writeIds: number[];
}

export interface FsWatchMissingResult {
  watching: boolean;
}

export interface FsMissingChangedNotification {
  watchId: number;
}

export interface EnvironmentConfigLayer {
  /** e.g. "user (/home/me/.codex/config.toml)" */
  source: string;
  baseDir: string;
  /** The layer reduced to the requested TOML paths. */
  toml: string;
}

export interface EnvironmentConfigReadResult {
  userHomeDir: string;
  codexHomeDir: string;
  hostname: string;
  config: { layers: EnvironmentConfigLayer[]; cloudInsertionIndex: number };
  requirements: { layers: EnvironmentConfigLayer[]; cloudInsertionIndex: number };
}
