/**
 * The client's view of extension `attach` on the wire (docs/protocol.md, "Detach, attach
 * and watch"): what `initialize` carries to name a session or attach to one, what its answer
 * says about the attached session, and the `session/writer` notification. Shapes only.
 */

/** The extension's name, asked for explicitly with `tether.name` and `tether.attach`. */
export const ATTACH_EXTENSION = 'attach';

/** Methods and notifications of extension `attach`. */
export const AttachMethod = {
  /** Notification to a writer whose session another connection took (`take`): it now watches. */
  sessionWriter: 'session/writer',
  /** A watcher's snapshot of the session's processes. */
  sessionWatch: 'session/watch',
  /** Notification to a watcher: the session ended (its writer closed it, it expired); what became of each process. */
  sessionEnded: 'session/ended',
} as const;

export type AttachRole = 'writer' | 'watcher';

/** `tether.attach` in `initialize`. */
export interface AttachRequest {
  /** The session's full id, or its name. */
  session: string;
  role: AttachRole;
  take?: boolean;
}

/** One process of an attached session, as the `initialize` answer (and `session/watch`) lists it. */
export interface AttachedProcess {
  processId: string;
  argv: string[];
  tty: boolean;
  state: 'running' | 'exited';
  exitCode: number | null;
  /** The seq the process's next event will have. */
  nextSeq: number;
  /** What the session's writer last acknowledged (`tether attach` takes up after it). */
  ackedSeq: number;
  /** Extension `binaryOutput`: the handle its frames carry (chosen by the client that started it). */
  handle?: number;
}

/** `tether.attached` of the `initialize` answer. */
export interface AttachedSession {
  sessionId: string;
  name?: string;
  role: AttachRole;
  processes: AttachedProcess[];
}

/** `session/writer`: this connection is no longer its session's writer (`reason` "taken"). */
export interface SessionWriterNotification {
  writer: boolean;
  reason?: string;
}

/** `session/ended`: the watched session ended; each process's exit code (null: killed by the end), whether it closed, its next seq. */
export interface SessionEndedNotification {
  reason: string;
  processes: { processId: string; exitCode: number | null; closed: boolean; nextSeq: number }[];
}

/** A process/read answer under `attach` may say the seqs it will never return (evicted history). */
export interface ReadGap {
  firstSeq: number;
  lastSeq: number;
}

/** A session name: 1..64 of `[A-Za-z0-9._-]`, not shaped like a UUID (those are ids). */
export function invalidSessionName(name: string): string | null {
  if (!/^[A-Za-z0-9._-]{1,64}$/.test(name)) return 'must be 1..64 characters of A-Z a-z 0-9 . _ -';
  if (/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(name)) return 'must not look like a session id (a UUID)';
  return null;
}
