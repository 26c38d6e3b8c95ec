import type { z } from 'zod';
import type { TetherInitializeResult } from './extensions.js';
import type {
  EnvPolicySchema,
  InitializeParamsSchema,
  ProcessReadParamsSchema,
  ProcessSignalParamsSchema,
  ProcessStartParamsSchema,
  ProcessTerminateParamsSchema,
  ProcessWriteParamsSchema,
  SignalNameSchema,
} from './schemas.js';

export type InitializeParams = z.input<typeof InitializeParamsSchema>;
export type EnvPolicy = z.input<typeof EnvPolicySchema>;
export type ProcessStartParams = z.input<typeof ProcessStartParamsSchema>;
export type ProcessReadParams = z.input<typeof ProcessReadParamsSchema>;
export type ProcessWriteParams = z.input<typeof ProcessWriteParamsSchema>;
export type ProcessSignalParams = z.input<typeof ProcessSignalParamsSchema>;
export type ProcessTerminateParams = z.input<typeof ProcessTerminateParamsSchema>;
export type SignalName = z.infer<typeof SignalNameSchema>;

export type OutputStream = 'stdout' | 'stderr' | 'pty';

export interface InitializeResult {
  sessionId: string;
  environmentInfo?: EnvironmentInfo;
  /** Present only when the client asked (extensions.ts): the extensions this session has. */
  tether?: TetherInitializeResult;
}

/** Codex's field names and types (docs/protocol.md). */
export interface EnvironmentInfo {
  shell: { name: string; path: string };
  executorVersion: string;
  providerId: string;
  cwd: string;
  userHomeDir: string;
  platformOs: string;
  prependPathDirs: string[];
  temporaryDirectories: string[];
  tempDir: string;
  capabilities: Record<string, boolean>;
}

export interface ProcessStartResult {
  processId: string;
  sandboxType: 'none';
  /** Extension `binaryOutput` only: the handle that addresses this process in binary frames. */
  handle?: number;
}

export interface OutputChunk {
  seq: number;
  stream: OutputStream;
  /** base64 */
  chunk: string;
}

export interface ProcessReadResult {
  chunks: OutputChunk[];
  nextSeq: number;
  exited: boolean;
  exitCode: number | null;
  closed: boolean;
  failure: string | null;
  sandboxDenied: false;
  /**
   * Extension `attach`, a watcher's read only: seqs `firstSeq`..`lastSeq` after its `afterSeq`
   * are no longer kept (acknowledged by the writer and past the retention): it will never get
   * them. The chunks after them are exact.
   */
  gap?: { firstSeq: number; lastSeq: number };
}

export type WriteStatus = 'accepted' | 'unknownProcess' | 'stdinClosed' | 'starting';

export interface ProcessWriteResult {
  status: WriteStatus;
}

export interface ProcessTerminateResult {
  running: boolean;
}

export interface ProcessOutputNotification extends OutputChunk {
  processId: string;
}

export interface ProcessExitedNotification {
  processId: string;
  seq: number;
  exitCode: number;
  sandboxDenied: false;
}

export interface ProcessClosedNotification {
  processId: string;
  seq: number;
}

/** Method names, so neither side spells them twice. */
export const Method = {
  initialize: 'initialize',
  initialized: 'initialized',
  environmentInfo: 'environment/info',
  environmentStatus: 'environment/status',
  processStart: 'process/start',
  processRead: 'process/read',
  processWrite: 'process/write',
  processSignal: 'process/signal',
  processTerminate: 'process/terminate',
  processOutput: 'process/output',
  processExited: 'process/exited',
  processClosed: 'process/closed',
  /** tether extension `acks` (notification): the client consumed a process's events up to `seq`. */
  processAck: 'process/ack',
  /** tether extension `sessionClose`: end the session now (kill its processes, forget it). */
  sessionClose: 'session/close',
  /** tether extension `sessionList`: the caller's sessions and their processes (all of them for the admin token). */
  sessionList: 'session/list',
  /** tether extension `processResize`: set a tty process's terminal size. */
  processResize: 'process/resize',
  /** tether extension `keepLast` (notification): seqs `firstSeq`..`lastSeq` of a process were dropped unread. */
  processGap: 'process/gap',
  /** tether extension `attach`: the session's processes now (a watcher's snapshot). */
  sessionWatch: 'session/watch',
  /** tether extension `attach` (notification): this connection is no longer the session's writer (`take`). */
  sessionWriter: 'session/writer',
  sessionEnded: 'session/ended',
} as const;

/** `process/gap` (extension `keepLast`): a process's output seqs `firstSeq`..`lastSeq` (`bytes` bytes) were dropped. */
export interface ProcessGapNotification {
  processId: string;
  firstSeq: number;
  lastSeq: number;
  bytes: number;
  reason: 'keep-last';
}

/** One process in a `session/list` answer. */
export interface ProcessListing {
  processId: string;
  argv: string[];
  pid: number;
  tty: boolean;
  /** running: no exit yet; exited: exited, its output still readable. */
  state: 'running' | 'exited';
  exitCode: number | null;
  /** ISO 8601. */
  startedAt: string;
  ageMs: number;
  /** Output read from it (stdout, stderr or its terminal), in bytes. */
  bytesOut: number;
  /** Written to its stdin, in bytes. */
  bytesIn: number;
  /** Its output is not being read right now (a client behind, or retention full of unread output). */
  paused: boolean;
  /**
   * While paused, why (tether extension): "output-window" (its window is full and nothing
   * spills), "output-disk-quota" or "output-disk-full" (its output past the window cannot go
   * to disk: the quota, a full filesystem), "memory" (the memory budget), "read-ahead" (its
   * connection is behind).
   */
  pausedBy?: string;
  /** Its unacknowledged output on disk (the state dir's spill), when there is any. */
  spilledBytes?: number;
  /** Present (true) when `argv` was cut to the listing's limit (4096 characters in all): the process runs the whole one. */
  argvTruncated?: true;
}

/** One session in a `session/list` answer. */
export interface SessionListing {
  /** The first 8 characters of the session id (the whole id is a resume credential: never listed). */
  session: string;
  /** The `clientName` of its last initialize. */
  clientName: string;
  /** The session of the connection that asked. */
  current: boolean;
  attached: boolean;
  /** ISO 8601. */
  createdAt: string;
  /** While detached: when it expires unless a client resumes it (ISO 8601). */
  expiresAt: string | null;
  /** How long it outlives a drop (ms): the server's session TTL, or the keep its client asked for and was granted (`sessionKeep`). */
  keepMs?: number;
  /** Which token created it (the first 8 hex digits of its sha256): only in an admin's list. */
  owner?: string;
  /**
   * Only while the memory budget holds its output back: why, e.g. "paused: over fair share
   * (300.0MiB of 200.0MiB)" (its children are not read until it falls below its share).
   */
  budgetHold?: string;
  /** Present (true) only for a session a server adopted from its predecessor (restart adoption: a restart, upgrade or crash). */
  adopted?: boolean;
  /** Extension `attach`: its name, when it was given one. */
  name?: string;
  /** Connections watching it read-only (extension `attach`); tether servers before it leave it out. */
  watchers?: number;
  processes: ProcessListing[];
}

export interface SessionListResult {
  /** own: the sessions of the caller's token; all: every session (the admin token). */
  scope: 'own' | 'all';
  sessions: SessionListing[];
  /** Present (true) when the answer reached its size limit (4 MiB): the sessions or processes past it are not listed. */
  truncated?: true;
}
