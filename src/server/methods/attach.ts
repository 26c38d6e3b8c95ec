/**
 * Extension `attach` (docs/protocol.md, "Detach, attach and watch"): which session an
 * `initialize` with `tether.attach` names (by id or by name, own token only, the admin token
 * any), what an attacher is told of its processes, the watcher's read-only gate (every method
 * but the few a watcher may call is refused in one place), and the audit lines.
 */
import type { JSONRPCServer } from 'json-rpc-2.0';
import { Messages, Method, invalidParams, invalidRequest, type AttachedProcess, type AttachRole } from '../../protocol/index.js';
import type { Logger } from '../../util/logger.js';
import type { ConnectionContext } from '../connection/index.js';
import { logfmtValue, type ServerMonitor, type Session } from '../session/index.js';

/** What a watching connection may call; anything else is refused with `Messages.watcherReadOnly`. */
const WATCHER_METHODS: ReadonlySet<string> = new Set([
  Method.initialize,
  Method.initialized,
  Method.processRead,
  Method.sessionList,
  Method.sessionWatch,
  Method.environmentInfo,
  Method.environmentStatus,
]);

/** What the refusal says a watcher would have to be the writer to do. */
export function watcherVerb(method: string): string {
  switch (method) {
    case Method.processStart:
      return 'start processes';
    case Method.processWrite:
      return 'write to a process';
    case Method.processSignal:
      return 'signal a process';
    case Method.processTerminate:
      return 'terminate a process';
    case Method.processResize:
      return 'resize a terminal';
    case Method.sessionClose:
      return 'close the session';
  }
  if (method.startsWith('fs/')) return 'use the filesystem';
  if (method.startsWith('http/')) return 'make http requests';
  return `call ${method}`;
}

/** Refuses, before any handler, every method a watching connection may not call (notifications are dropped). */
export function gateWatchers(rpc: JSONRPCServer<ConnectionContext>): void {
  rpc.applyMiddleware(async (next, request, ctx) => {
    const watched = ctx.conn.watching;
    if (!watched || WATCHER_METHODS.has(request.method)) return next(request, ctx);
    if (request.id === undefined) return null;
    return { jsonrpc: '2.0', id: request.id, error: invalidRequest(Messages.watcherReadOnly(watched.label, watcherVerb(request.method))).toJSON() };
  });
}

/**
 * The session `target` (a full id, or a name) names for a caller holding `credential`: only
 * its own token's sessions, any for the admin token. Unknown, expired or another token's:
 * the same -32600 as a session that never existed (nothing about it is revealed).
 */
export function resolveTarget(sessions: ReadonlyMap<string, Session>, target: string, credential: Buffer, admin: boolean): Session {
  const visible = (s: Session): boolean => !s.isExpired && (admin || s.ownedBy(credential));
  const byId = sessions.get(target);
  if (byId && visible(byId)) return byId;
  const named: Session[] = [];
  for (const s of sessions.values()) if (s.name === target && visible(s)) named.push(s);
  // Only the admin token can see one name in several tokens' sessions.
  if (named.length > 1) throw invalidParams(Messages.nameAmbiguous(target));
  if (named.length === 1) return named[0]!;
  throw invalidRequest(Messages.unknownSession(target));
}

/** A new session's name must not be one of its token's live sessions' (-32602). */
export function checkNameFree(sessions: Iterable<Session>, name: string, credential: Buffer): void {
  for (const s of sessions) if (!s.isExpired && s.name === name && s.ownedBy(credential)) throw invalidParams(Messages.nameInUse(name));
}

/** Connections of the token `credential` watching sessions (they count against --max-sessions-per-token). */
export function watchersOf(sessions: Iterable<Session>, credential: Buffer): number {
  let n = 0;
  for (const s of sessions) n += s.watchersHolding(credential);
  return n;
}

/** The session's processes as an attacher sees them (`tether.attached.processes`, `session/watch`). */
export function attachedProcesses(session: Session, monitor: ServerMonitor): AttachedProcess[] {
  return [...session.processes.values()].map((proc) => ({
    processId: proc.id,
    argv: [...(monitor.processFacts(proc)?.argv ?? [])],
    tty: proc.tty,
    state: proc.exitCode === null && !proc.closed ? 'running' : 'exited',
    exitCode: proc.exitCode,
    nextSeq: proc.nextSeq,
    ackedSeq: proc.acknowledgedSeq,
    // binaryOutput: a writer is sent frames addressed by the handle the starter chose.
    ...(proc.handle !== 0 ? { handle: proc.handle } : {}),
  }));
}

/** A token as audit lines name it: the first 8 hex digits of its digest ("none" without auth). */
function tokenTag(credential: Buffer): string {
  return credential.length > 0 ? credential.subarray(0, 4).toString('hex') : 'none';
}

/** One audit line per attach (and per writer moved by `take`). */
export function auditAttach(
  log: Logger,
  session: Session,
  how: { role: AttachRole; credential: Buffer; admin: boolean; remote: string; took: boolean },
): void {
  const who = `token=${tokenTag(how.credential)} admin=${how.admin} from=${logfmtValue(how.remote)}`;
  const which = `session=${session.id.slice(0, 8)} name=${logfmtValue(session.name ?? '')} owner=${session.ownerTag}`;
  log('info', `audit attach: role=${how.role} ${which} ${who}`);
  if (how.took) log('info', `audit attach: writer of session ${session.id.slice(0, 8)} taken by ${who}`);
}
