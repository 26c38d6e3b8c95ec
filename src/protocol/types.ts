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

/** Codex's field names and types (PROTOCOL.md section 3). */
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
  /** tether extension `sessionClose`: end the session now (kill its processes, forget it). */
  sessionClose: 'session/close',
} as const;
