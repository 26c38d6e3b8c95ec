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

// The shapes the server answers with are the protocol's own (src/protocol/extensions.ts).
export type { AttachedProcess, AttachedSession, AttachRequest, AttachRole, SessionEndedNotification } from '../../protocol/extensions.js';
export { invalidSessionName } from '../../protocol/extensions.js';

/** `session/writer`: this connection is no longer its session's writer (`reason` "taken"). */
export interface SessionWriterNotification {
  writer: boolean;
  reason?: string;
}

/** A process/read answer under `attach` may say the seqs it will never return (evicted history). */
export interface ReadGap {
  firstSeq: number;
  lastSeq: number;
}
