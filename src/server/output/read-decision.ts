/**
 * Whether to read a child's output now: the one place this decision is made, from the
 * process's output log (window, read-ahead) and the server's memory budget. Pure; applied by
 * ManagedProcess (process.ts) to its child.
 */

/** What the decision to read a child looks at (see `shouldReadChild`). */
export interface ReadDecisionInputs {
  /** The process closed or is being removed: its pipes must drain to end of file. */
  finished: boolean;
  /** A connection is attached and ready to take output. */
  attached: boolean;
  unackedBytes: number;
  unsentBytes: number;
  windowBytes: number;
  /**
   * While attached, output not yet handed to the connection at which reading stops: there is
   * no point reading a child faster than its socket drains (memory), and the child's own
   * pipe buffer holds the rest. While detached, output collects up to the window, so a
   * client that comes back within the TTL finds it waiting.
   */
  readAheadBytes: number;
  /**
   * The server-wide memory budget (memory/memory-budget.ts) is past its pause mark (90 %, until it falls
   * below 80 %): every producer pauses, its child blocks on write, nothing is dropped.
   */
  memoryPressured: boolean;
}

/** Whether to read a child's output now. The only place this decision is made. */
export function shouldReadChild(f: ReadDecisionInputs): boolean {
  if (f.finished) return true;
  if (f.memoryPressured) return false;
  if (f.unackedBytes >= f.windowBytes) return false;
  if (f.attached && f.unsentBytes >= f.readAheadBytes) return false;
  return true;
}
