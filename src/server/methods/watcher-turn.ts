/**
 * Watchers yield to the writer (extension `attach`): what a watcher's `process/read` waits for
 * and how much it may carry, so that watchers, however many, take the CPU the writer's stream
 * leaves. While the writer has output of that process not yet sent or acknowledged (it is
 * streaming), a watcher's answer waits WATCHER_YIELD_MS for each started group of
 * WATCHERS_PER_TURN watchers of the session, and carries at most WATCHER_BUSY_BYTES: all the
 * watchers of a streaming session together take at most about 5 MiB/s, however many; a
 * watcher of a fast stream falls behind on its own and reads on from what is kept, or is told
 * the exact gap. A process whose writer is caught up (or absent) is read at once, as by anyone.
 * Pure.
 */

/** How long a watcher's answer waits while the writer is streaming. */
export const WATCHER_YIELD_MS = 100;
/** The most a watcher's answer carries while the writer is streaming (64 KiB: 640 KiB/s per watcher at most). */
export const WATCHER_BUSY_BYTES = 64 * 1024;
/** Watchers that share one turn: with more, each waits proportionally longer. */
export const WATCHERS_PER_TURN = 8;

export interface WatcherTurn {
  /** Wait this long before answering (0: at once). */
  waitMs: number;
  /** The answer's cap in bytes (null: the read's own `maxBytes`, within the server's read cap). */
  capBytes: number | null;
}

/** The watcher's turn for a read, given whether the writer is streaming the process and how many watch the session. */
export function watcherTurn(writerStreaming: boolean, watchers = 1): WatcherTurn {
  if (!writerStreaming) return { waitMs: 0, capBytes: null };
  return { waitMs: WATCHER_YIELD_MS * Math.max(1, Math.ceil(watchers / WATCHERS_PER_TURN)), capBytes: WATCHER_BUSY_BYTES };
}

/** The answer's `maxBytes`: the read's own, within the turn's cap. */
export function watcherMaxBytes(asked: number | null, turn: WatcherTurn): number | null {
  if (turn.capBytes === null) return asked;
  return asked === null ? turn.capBytes : Math.min(asked, turn.capBytes);
}
