/**
 * The checks every exec-server method makes after its params (docs/protocol.md, "Handshake"):
 * the connection's handshake state, in Codex's words for each method family, and the process
 * a method names.
 */
import { Messages, invalidRequest } from '../../protocol/index.js';
import type { Connection } from '../connection/index.js';
import type { ManagedProcess } from '../output/index.js';
import type { Session } from '../session/index.js';

/** Which words Codex uses in its "client must call initialize before using … methods" texts. */
export type Family = 'exec' | 'environment info' | 'environment status' | 'filesystem' | 'environment config' | 'http';

const notInitialized = (family: Family) => `client must call initialize before using ${family} methods`;
const notInitializedNotified = (family: Family) => `client must send initialized before using ${family} methods`;

/**
 * The connection's session once it is initialized. A watching connection (extension `attach`)
 * has none (null: its `watching` is the session it may read); every method a watcher may not
 * call was refused before its handler (attach.ts `gateWatchers`).
 */
export function requireReady(conn: Connection, family: Family): Session {
  if (conn.state === 'new') throw invalidRequest(notInitialized(family));
  if (conn.state === 'initializing') throw invalidRequest(notInitializedNotified(family));
  return conn.session!;
}

export function requireProcess(session: Session, processId: string): ManagedProcess {
  const proc = session.processes.get(processId);
  if (!proc) throw invalidRequest(Messages.unknownProcess(processId));
  return proc;
}

