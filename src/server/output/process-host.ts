/**
 * What a ManagedProcess (process.ts) is given: the session it reports to (`ProcessHost`),
 * how it keeps and paces its output (`OutputLimits`, from the server's options), and what
 * to start (`SpawnSpec`). Types only.
 */
import type { ManagedProcess } from './process.js';
import type { MemoryBudget } from '../memory/memory-budget.js';
import type { ChildSpec } from '../local/spawn.js';

/** The session a process belongs to: it schedules sending over the attached connection. */
export interface ProcessHost {
  /** A connection is attached and taking output (the initialize answer went out). */
  readonly attached: boolean;
  /** The process has something to send: put it in the send rotation. */
  outputReady(proc: ManagedProcess): void;
  processClosed(proc: ManagedProcess): void;
  /** The client acknowledged every event up to the close (`acks`): its output was freed. */
  processDone(proc: ManagedProcess): void;
  /** The output this process holds under the memory budget changed by `delta` bytes (its session's fair share). */
  outputHeldChanged?(delta: number): void;
  /**
   * Whether the memory budget holds this session's children back now (its fair share,
   * fair-share.ts); undefined: whenever the budget is pressured.
   */
  readonly outputHeldBack?: boolean;
}

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
}
