/**
 * What a ManagedProcess (process.ts) is given besides the session it reports to (process.ts
 * `ProcessHost`): how it keeps and paces its output (`OutputLimits`, from the server's
 * options), what to start (`SpawnSpec`), and, adopted by a successor server (restart
 * adoption), its log rebuilt and what its keeper knew (`AdoptedOutput`). Types only.
 */
import type { MemoryBudget } from '../memory/index.js';
import type { ChildSpec, KeptChild } from '../backend/index.js';
import type { OutputLog, OutputMemory } from './log/output-log.js';
import type { OutputSpill } from './log/output-spill.js';

/** How a process keeps and paces its output (from the server's options). */
export interface OutputLimits {
  /** Unacknowledged output at which the child stops being read (--output-window). */
  windowBytes: number;
  /** Acknowledged output kept for process/read (--output-retention). */
  retentionBytes: number;
  /** Output not yet handed to an attached connection at which the child stops being read. */
  readAheadBytes: number;
  /** Largest chunk built by joining reads while the socket is busy. */
  maxChunkBytes: number;
  /** Largest process/read answer (decoded bytes), so a big log is never one giant message. */
  readCapBytes: number;
}

export interface SpawnSpec extends ChildSpec {
  processId: string;
  limits: OutputLimits;
  /** The session negotiated `acks`: the client acknowledges what it consumed. */
  clientAcks: boolean;
  /** The server's memory budget: the output kept is counted there, and its pressure pauses the child. */
  memory?: MemoryBudget;
  /** Extension `binaryOutput`: the handle addressing its binary output frames (0: none). */
  handle?: number;
  /** Where its output past the window goes instead of pausing the child (a state dir's disk); none: it pauses. */
  spill?: OutputSpill;
  /** Extension `keepLast`: drop the oldest unacknowledged output past this many bytes instead of pausing. */
  keepLastBytes?: number;
}

/**
 * Opens a process's output log, its bytes in `memory`; `kept` is its child's keeper side, once
 * there is one (the child is attached after the log opens: a log that tells its keeper something
 * while it opens, as a restore that spills does, is given its keeper otherwise).
 */
export type LogOpener = (memory: OutputMemory, kept: () => KeptChild | undefined) => OutputLog;

/** A process adopted by a successor server: its log rebuilt (restart/process-kept.ts) and what its keeper knew. */
export interface AdoptedOutput {
  /** Opens its log rebuilt from what its keeper kept: the seqs its clients saw stay the same. */
  openLog: LogOpener;
  /** Its exit as its keeper knew it (the command's status, or 128+N for signal N); null: it runs. */
  exitCode: number | null;
  /** The writeIds its keeper took, oldest first. */
  writeIds: readonly string[];
}
