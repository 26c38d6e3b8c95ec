/**
 * The handshake and session methods (docs/protocol.md, "Handshake, sessions and extensions"):
 * `initialize` (a new session, or the resume of a detached one, with the extensions the
 * back-end can carry), `initialized`, `environment/info` and `/status`, `session/close` and
 * `session/list`.
 */
import { randomUUID } from 'node:crypto';
import type { JSONRPCServer } from 'json-rpc-2.0';
import {
  EmptyParamsSchema,
  ErrorCode,
  InitializeParamsSchema,
  Messages,
  Method,
  RpcError,
  EXTENSIONS_VERSION,
  acceptExtensions,
  sameExtensions,
  internalError,
  invalidParams,
  invalidRequest,
  methodNotFound,
  parseParams,
} from '../../protocol/index.js';
import type { AttachedSession, AttachRole, ExtensionName, InitializeResult, SessionListResult, SessionWatchResult, TetherInitializeResult } from '../../protocol/index.js';
import type { Logger } from '../../util/logger.js';
import type { ServerBackend } from '../backend/index.js';
import type { Connection, ConnectionContext } from '../connection/index.js';
import type { FsRegistration } from '../fs/index.js';
import { type MemoryBudget, shareOwner, type OutputShares } from '../memory/index.js';
import { attachedProcesses, auditAttach, checkNameFree, resolveTarget, watchersOf } from './attach.js';
import { listSessions, MAX_LIST_BYTES } from './listing.js';
import { requireReady } from './method-guards.js';
import { grantKeep, logfmtValue, type KeepLimits, type ServerMonitor, Session, type DeliveredMap, type SessionLimits } from '../session/index.js';

/** What a session is told when it expires, detaches or its processes change (the server's hooks). */
export type SessionHooks = ConstructorParameters<typeof Session>[3];

/** What a server with a state dir (restart adoption, restart/kept-server.ts) does for the session methods. */
export interface SessionKeeping {
  /** A new session's first record, written before its initialize answer goes out. */
  created(session: Session): void;
  /** Its record is written again (soon): what it records changed (a resume's new keep). */
  save(session: Session): void;
  /** Recorded processes a restart could not keep, told to a resuming client. */
  readonly lost: {
    named(sessionId: string, delivered: DeliveredMap | null | undefined, has: (processId: string) => boolean, restored: boolean): Record<string, string> | undefined;
  };
}

/** What the handshake and session methods use of the server. */
export interface SessionMethodsState {
  /** Live sessions by id (attached or detached). */
  sessions: Map<string, Session>;
  limits: SessionLimits;
  /** How long a session may outlive a drop: the TTL, and the most a client may ask (`sessionKeep`). */
  keep: KeepLimits;
  maxSessions: number;
  /** Sessions one token may have at once (--max-sessions-per-token). */
  maxSessionsPerToken?: number;
  /** Fair shares of the memory budget's output between tokens and sessions (fair-share.ts). */
  shares?: OutputShares;
  /** The server-wide memory budget: new sessions are refused when it is spent. */
  memory?: Pick<MemoryBudget, 'refusal'>;
  /** How long a connection whose session someone tries to resume has to answer a ping. */
  livenessProbeMs: number;
  sessionHooks: SessionHooks;
  log: Logger;
  /** Counts, facts for `session/list`, and the audit trail. */
  monitor: ServerMonitor;
  /** Digest of the admin token: a connection holding it lists every session. */
  adminCredential: Buffer | null;
  /** Where the work is done (backend.ts): each session's back-end, the host's description. */
  backend: ServerBackend;
  /** A state dir (restart adoption): sessions are recorded, lost processes told. */
  kept?: SessionKeeping;
}

function isAdmin(state: Pick<SessionMethodsState, 'adminCredential'>, credential: Buffer): boolean {
  return state.adminCredential !== null && credential.equals(state.adminCredential);
}

/** `tether.attached` of an attach's answer. */
function attachedAnswer(state: Pick<SessionMethodsState, 'monitor'>, session: Session, role: AttachRole): AttachedSession {
  return { sessionId: session.id, ...(session.name !== null ? { name: session.name } : {}), role, processes: attachedProcesses(session, state.monitor) };
}

/**
 * `initialize` with `tether.attach {role: "watcher"}`: the connection watches `target`
 * read-only. It counts against its token's session cap; nothing of the session changes
 * (a detached session stays detached, its TTL running).
 */
function watchSession(state: SessionMethodsState, conn: Connection, target: string, extensions: ExtensionName[], admin: boolean, clientName: string): InitializeResult {
  const session = resolveTarget(state.sessions, target, conn.credential, admin);
  const perToken = state.maxSessionsPerToken;
  if (perToken !== undefined && state.shares && state.shares.sessionsOf(shareOwner(conn.credential)) + watchersOf(state.sessions.values(), conn.credential) >= perToken) {
    state.monitor.refused('sessionsPerToken');
    throw invalidRequest(`too many sessions for this token: it may have at most ${perToken} at once, watchers included (--max-sessions-per-token); close one of them instead`);
  }
  conn.state = 'initializing';
  conn.watch(session, new Set(extensions));
  auditAttach(state.log, session, { role: 'watcher', credential: conn.credential, admin, remote: conn.remote, took: false });
  state.log('debug', `session ${session.shortId} watched by ${conn.remote} (client ${logfmtValue(clientName)})`);
  const tether: TetherInitializeResult = { version: EXTENSIONS_VERSION, extensions, attached: attachedAnswer(state, session, 'watcher') };
  if (session.name !== null) tether.name = session.name;
  return { sessionId: session.id, environmentInfo: session.backend.environmentInfo(), tether };
}

/**
 * The back-end can no longer do a session's work (a relay's upstream session is gone): the
 * session expires, and its client, dropped, hears what a Codex server says for an unknown
 * session when it tries to resume it (and for unknown processes meanwhile).
 */
function lostSession(state: Pick<SessionMethodsState, 'log'>, session: Session, reason: string): void {
  if (session.isExpired) return;
  state.log('info', `session ${session.shortId} lost by its back-end: ${reason}`);
  session.lost(`session lost: ${reason}`);
}

export function registerSessionMethods(rpc: JSONRPCServer<ConnectionContext>, state: SessionMethodsState, fs: Pick<FsRegistration, 'connectionReady'>): void {
  rpc.addMethod(Method.initialize, (params, ctx): InitializeResult => {
    const conn = ctx.conn;
    if (conn.state !== 'new') throw invalidRequest(Messages.alreadyInitialized);
    const p = parseParams(Method.initialize, InitializeParamsSchema, params);
    // Only what the back-end can carry (a relay: what its upstream negotiated). One that
    // carries none (a relay in front of Codex) answers as Codex does: the member is ignored.
    // Binary output needs binary messages (a stdio link has none).
    const carried = state.backend.extensions;
    if (carried?.size === 0) delete p.tether;
    const extensions = acceptExtensions(p.tether).filter((name) => (carried === null || carried.has(name)) && (conn.binaryFrames || name !== 'binaryOutput'));
    const admin = isAdmin(state, conn.credential);
    const attach = p.tether?.attach ?? null;
    if ((attach || p.tether?.name) && !extensions.includes('attach')) {
      throw invalidParams(`invalid params for initialize: tether.${attach ? 'attach' : 'name'}: needs the attach extension (ask for it in tether.extensions)`);
    }
    if (attach && p.resumeSessionId) {
      throw invalidParams('invalid params for initialize: tether.attach: cannot be combined with resumeSessionId (attach by id instead)');
    }
    if (attach?.role === 'watcher') return watchSession(state, conn, attach.session, extensions, admin, p.clientName);
    let session: Session;
    if (p.resumeSessionId || attach) {
      const target = attach ? attach.session : p.resumeSessionId!;
      let existing: Session;
      if (attach) existing = resolveTarget(state.sessions, target, conn.credential, admin);
      else {
        const found = state.sessions.get(target);
        // A session created with another credential is reported unknown: its existence is not revealed.
        if (!found || found.isExpired || !found.ownedBy(conn.credential)) throw invalidRequest(Messages.unknownSession(target));
        existing = found;
      }
      if (!sameExtensions(extensions, existing.extensions)) {
        throw invalidParams(
          `invalid params for initialize: tether.extensions: a resumed session keeps the extensions it was created with ` +
            `([${[...existing.extensions].join(', ')}]; this request asks for [${extensions.join(', ')}])`,
        );
      }
      const take = attach?.take === true;
      if (attach && !take && !existing.ownedBy(conn.credential)) {
        throw invalidRequest(`session ${existing.label} belongs to another token: the admin token attaches to it as the writer only with take`);
      }
      if (existing.attached && !take) {
        existing.probeAttached(state.livenessProbeMs);
        throw new RpcError(ErrorCode.SessionAttached, attach ? Messages.writerAttached(existing.label) : Messages.sessionAttached(target));
      }
      session = existing;
      // take: the writer's connection becomes a watcher (told `session/writer`); this one is the writer.
      const took = existing.releaseWriter() !== null;
      if (attach) auditAttach(state.log, session, { role: 'writer', credential: conn.credential, admin, remote: conn.remote, took });
      // Each resume's ask replaces the last grant (a successor server may grant less or more).
      if (session.extensions.has('sessionKeep')) {
        const before = session.limits.ttlMs;
        session.keepFor(grantKeep(p.tether?.keepMs, state.keep, before));
        if (session.limits.ttlMs !== before) state.kept?.save(session);
      }
      // One info line per reconnect (its detach is logged at debug): a flaky link's session
      // logs each drop once, with how long it lasted.
      const detachedMs = state.monitor.sessionResumed(session, p.clientName);
      state.log('info', `session ${session.shortId} resumed by ${conn.remote} (client ${logfmtValue(p.clientName)})${detachedMs !== null ? ` after ${detachedMs} ms detached` : ''}`);
    } else {
      if (state.sessions.size >= state.maxSessions) {
        state.monitor.refused('sessions');
        throw invalidRequest(`too many sessions: this server allows at most ${state.maxSessions} (--max-sessions)`);
      }
      const perToken = state.maxSessionsPerToken;
      if (perToken !== undefined && state.shares && state.shares.sessionsOf(shareOwner(conn.credential)) + watchersOf(state.sessions.values(), conn.credential) >= perToken) {
        state.monitor.refused('sessionsPerToken');
        throw invalidRequest(
          `too many sessions for this token: it may have at most ${perToken} at once (--max-sessions-per-token); close or resume one of its sessions instead`,
        );
      }
      // A new session holds nothing: another's hoarding does not refuse it (--max-sessions-per-token bounds how many).
      const full = state.memory?.refusal('session', true);
      if (full) {
        state.monitor.refused('memoryBudget');
        throw internalError(full);
      }
      const name = p.tether?.name ?? null;
      if (name !== null) checkNameFree(state.sessions.values(), name, conn.credential);
      session = new Session(randomUUID(), conn.credential, { ...state.limits }, state.sessionHooks, new Set(extensions));
      session.name = name;
      // Its keep is granted before its first record is written (a successor keeps it as long).
      if (session.extensions.has('sessionKeep')) session.keepFor(grantKeep(p.tether?.keepMs, state.keep));
      const created = session;
      created.backend = state.backend.openSession(created, (reason) => lostSession(state, created, reason));
      if (state.shares) session.joinShares(state.shares);
      state.sessions.set(session.id, session);
      state.kept?.created(session);
      state.monitor.sessionCreated(session, p.clientName);
      state.log('info', `session ${session.shortId} created for ${conn.remote} (client ${logfmtValue(p.clientName)})`);
    }
    conn.state = 'initializing';
    conn.session = session;
    session.attach(conn, p.tether?.delivered ?? undefined);
    // Events (a resumed session's backlog first) flow once this answer is out.
    ctx.afterReply = () => session.startSending(conn);
    const result: InitializeResult = { sessionId: session.id, environmentInfo: session.backend.environmentInfo() };
    // Only a client that asked learns about extensions: a Codex client sees Codex's result.
    if (p.tether) {
      result.tether = { version: EXTENSIONS_VERSION, extensions };
      if (session.clientAcks) result.tether.outputWindow = session.limits.output.windowBytes;
      if (session.extensions.has('sessionKeep')) {
        result.tether.keepMs = session.limits.ttlMs;
        result.tether.keepMaxMs = state.keep.maxTtlMs;
      }
      // Processes it names that a restart could not keep: it is told now, not left waiting (restart adoption).
      const lost = session.clientAcks ? state.kept?.lost.named(session.id, p.tether.delivered, (id) => session.processes.has(id), session.adopted) : undefined;
      if (lost) result.tether.lost = lost;
      if (session.name !== null && extensions.includes('attach')) result.tether.name = session.name;
      if (attach) result.tether.attached = attachedAnswer(state, session, 'writer');
    }
    return result;
  });

  rpc.addMethod(Method.initialized, (_params, { conn }) => {
    // Before initialize it is ignored (Codex drops the connection; a serious server need not).
    if (conn.state === 'initializing') {
      conn.state = 'ready';
      fs.connectionReady(conn);
    }
    return {};
  });

  rpc.addMethod(Method.environmentInfo, (params, { conn }) => {
    parseParams(Method.environmentInfo, EmptyParamsSchema, params);
    return requireReady(conn, 'environment info').backend.environmentInfo();
  });

  rpc.addMethod(Method.environmentStatus, (params, { conn }) => {
    parseParams(Method.environmentStatus, EmptyParamsSchema, params);
    requireReady(conn, 'environment status');
    return { status: 'ready' };
  });

  rpc.addMethod(Method.sessionClose, (params, { conn }) => {
    parseParams(Method.sessionClose, EmptyParamsSchema, params);
    const session = requireReady(conn, 'exec');
    state.log('info', `session ${session.shortId} closed by its client`);
    state.monitor.sessionClosing(session);
    session.close();
    // The answer goes out first (it is sent when this handler's promise settles); then the
    // socket ends normally: there is nothing left on this connection to talk about.
    setImmediate(() => conn.ws.close(1000, 'session closed'));
    return {};
  });

  rpc.addMethod(Method.sessionWatch, (params, { conn }): SessionWatchResult => {
    // Extension `attach`: a watcher's (or its writer's) snapshot of the session's processes.
    if (!(conn.session?.extensions ?? conn.watchExtensions).has('attach')) throw methodNotFound(Method.sessionWatch);
    parseParams(Method.sessionWatch, EmptyParamsSchema, params);
    requireReady(conn, 'exec');
    const session = conn.session ?? conn.watching!;
    return { processes: attachedProcesses(session, state.monitor) };
  });

  rpc.addMethod(Method.sessionList, async (params, ctx): Promise<SessionListResult> => {
    const { conn } = ctx;
    // Not negotiated: the method does not exist for this session (as for any Codex client).
    if (!(conn.session?.extensions ?? conn.watchExtensions).has('sessionList')) throw methodNotFound(Method.sessionList);
    parseParams(Method.sessionList, EmptyParamsSchema, params);
    requireReady(conn, 'exec');
    const session = conn.session ?? conn.watching;
    // The answer is at most MAX_LIST_BYTES (listing.ts): built only once the send buffer has room for it.
    await conn.reserveAnswer(ctx, MAX_LIST_BYTES);
    return listSessions(state.sessions.values(), state.monitor, { credential: conn.credential, session, admin: isAdmin(state, conn.credential) });
  });

}
