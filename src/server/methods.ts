/**
 * The exec-server methods (docs/protocol.md, "Handshake, sessions and extensions" and "Processes"), registered on one shared
 * `json-rpc-2.0` server. Handlers throw `RpcError`; `createRpcServer` maps it to the wire
 * error and anything else to -32603.
 */
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { JSONRPCServer, type JSONRPCErrorResponse, type JSONRPCID } from 'json-rpc-2.0';
import {
  EmptyParamsSchema,
  ErrorCode,
  InitializeParamsSchema,
  Messages,
  Method,
  ProcessReadParamsSchema,
  ProcessSignalParamsSchema,
  ProcessStartParamsSchema,
  ProcessTerminateParamsSchema,
  ProcessResizeParamsSchema,
  ProcessWriteParamsSchema,
  RpcError,
  EXTENSIONS_VERSION,
  acceptExtensions,
  sameExtensions,
  internalError,
  invalidParams,
  invalidRequest,
  methodNotFound,
  parseParams,
} from '../protocol/index.js';
import type {
  InitializeResult,
  ProcessReadResult,
  ProcessStartResult,
  ProcessTerminateResult,
  ProcessWriteResult,
  SessionListResult,
} from '../protocol/index.js';
import type { Connection, ConnectionContext } from './connection.js';
import type { ProcessCapacity } from './capacity.js';
import type { DescriptorBudget } from './descriptors.js';
import type { MemoryBudget } from './memory-budget.js';
import { listSessions, MAX_LIST_BYTES } from './listing.js';
import { ByteBudget } from './fs/budget.js';
import { registerFsMethods, sessionShare, type FsServerLimits } from './fs/methods.js';
import { defaultMaxHttpSockets, defaultMaxHttpSocketsPerSession } from './descriptors.js';
import { OutgoingSockets } from './http-sockets.js';
import { HttpMethod, httpRequestMethod } from './http-request.js';
import { ManagedProcess } from './process.js';
import type { ServerBackend } from './backend.js';
import { Session } from './session.js';
import { shareOwner, type OutputShares } from './fair-share.js';
import type { SessionLimits } from './session.js';
import type { Logger } from '../util/logger.js';
import { logfmtValue, type ServerMonitor } from './monitor.js';

export interface ServerState {
  sessions: Map<string, Session>;
  /** Admits process starts within the descriptor limit. */
  descriptors?: Pick<DescriptorBudget, 'admitStart' | 'startDone'>;
  /** The server-wide memory budget: new sessions are refused when it is spent. */
  memory?: MemoryBudget;
  /** The server-wide process and pty caps (and the memory budget) for process/start. */
  capacity?: ProcessCapacity;
  limits: SessionLimits;
  /** Limits of the filesystem methods (server/fs/methods.ts). */
  fs: FsServerLimits;
  /** Outgoing http/request sockets across the server (set aside in the descriptor plan); default derived from the limit. */
  httpSockets?: number;
  maxSessions: number;
  /** Fair shares of the memory budget's output between tokens and sessions (fair-share.ts). */
  shares?: OutputShares;
  /** Sessions one token may have at once (--max-sessions-per-token). */
  maxSessionsPerToken?: number;
  /** How long a connection whose session someone tries to resume has to answer a ping. */
  livenessProbeMs: number;
  sessionHooks: { expired(session: Session): void; detached(session: Session): void };
  log: Logger;
  /** Counts, facts for `session/list`, and the audit trail. */
  monitor: ServerMonitor;
  /** Digest of the admin token: a connection holding it lists every session. */
  adminCredential: Buffer | null;
  /** Where the work is done (backend.ts): processes, files, HTTP, the host's description. */
  backend: ServerBackend;
}

/** Which words Codex uses in its "client must call initialize before using … methods" texts. */
type Family = 'exec' | 'environment info' | 'environment status' | 'filesystem' | 'environment config' | 'http';

const notInitialized = (family: Family) => `client must call initialize before using ${family} methods`;
const notInitializedNotified = (family: Family) => `client must send initialized before using ${family} methods`;

function requireReady(conn: Connection, family: Family): Session {
  if (conn.state === 'new') throw invalidRequest(notInitialized(family));
  if (conn.state === 'initializing') throw invalidRequest(notInitializedNotified(family));
  return conn.session!;
}

function requireProcess(session: Session, processId: string): ManagedProcess {
  const proc = session.processes.get(processId);
  if (!proc) throw invalidRequest(Messages.unknownProcess(processId));
  return proc;
}

/**
 * The back-end can no longer do a session's work (a relay's upstream session is gone): the
 * session expires, and its client, dropped, hears what a Codex server says for an unknown
 * session when it tries to resume it (and for unknown processes meanwhile).
 */
function lostSession(state: ServerState, session: Session, reason: string): void {
  if (session.isExpired) return;
  state.log('info', `session ${session.shortId} lost by its back-end: ${reason}`);
  session.lost(`session lost: ${reason}`);
}

/** file:///x → /x, with a -32602 naming the field when it is not a usable file URI. */
function cwdPath(uri: string): string {
  let path: string;
  try {
    path = fileURLToPath(uri);
  } catch (err) {
    throw invalidParams(`invalid params for process/start: cwd: ${(err as Error).message}`);
  }
  if (path.includes('\0')) throw invalidParams('invalid params for process/start: cwd: must not contain a NUL byte (%00)');
  return path;
}

/**
 * Node's timers hold at most 2^31-1 ms (about 24.8 days); a longer delay fires after 1 ms
 * with a TimeoutOverflowWarning. A long-poll asking for more waits that long instead.
 */
const MAX_WAIT_MS = 2 ** 31 - 1;

// Like Codex, every handler validates its params first and checks the handshake state second.
export function createRpcServer(state: ServerState): JSONRPCServer<ConnectionContext> {
  // Errors are answered on the wire (and internal ones logged below): the library need not print them.
  const rpc = new JSONRPCServer<ConnectionContext>({ errorListener: () => {} });

  rpc.mapErrorToJSONRPCErrorResponse = (id: JSONRPCID, error: unknown): JSONRPCErrorResponse => {
    if (error instanceof RpcError) return { jsonrpc: '2.0', id, error: error.toJSON() };
    state.log('error', `internal error: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    return {
      jsonrpc: '2.0',
      id,
      error: { code: ErrorCode.InternalError, message: error instanceof Error ? error.message : String(error) },
    };
  };
  rpc.handleMethodNotFound = async (request, ctx) => {
    if (request.id === undefined) return null; // unknown notifications are ignored (`id: null` is a request: answered)
    try {
      // Like Codex, a method of a known family checks the handshake first.
      if (request.method.startsWith('fs/')) requireReady((ctx as unknown as ConnectionContext).conn, 'filesystem');
      if (request.method.startsWith('http/')) requireReady((ctx as unknown as ConnectionContext).conn, 'http');
      throw methodNotFound(request.method);
    } catch (err) {
      return { jsonrpc: '2.0', id: request.id, error: (err as RpcError).toJSON() };
    }
  };

  // File data has one sub-budget (--fs-memory, at most a quarter of the memory budget), counted
  // in the memory budget as it is handed out, a share at most per session.
  const dataBytes = Math.max(1, Math.min(state.fs.memoryBytes, state.memory ? Math.floor(state.memory.limit / 4) : Number.POSITIVE_INFINITY));
  const dataBudget = new ByteBudget(dataBytes, state.memory?.account('files'), sessionShare(dataBytes, state.fs.maxReadFileBytes));
  const fs = registerFsMethods(rpc, state.fs, requireReady, dataBudget);
  // Producers pause at the budget's pause mark and are read again below its resume mark: a
  // rare event (the budget must swing by a tenth), so every process is told.
  state.memory?.onPressureChange(() => {
    for (const session of state.sessions.values()) for (const proc of session.processes.values()) proc.memoryPressureChanged();
  });
  // Buffered HTTP bodies come out of their own session's share (two bodies at the cap at once),
  // never the fs data budget: a body that trickles in for minutes must not starve others' reads.
  const httpBodies = new WeakMap<Session, ByteBudget>();
  const bodiesOf = (session: Session): ByteBudget => {
    let budget = httpBodies.get(session);
    if (!budget) httpBodies.set(session, (budget = new ByteBudget(2 * state.fs.maxReadFileBytes, state.memory?.account('http'))));
    return budget;
  };
  const maxHttpSockets = state.httpSockets ?? defaultMaxHttpSockets();
  const outgoing = new OutgoingSockets({ max: maxHttpSockets, perSession: defaultMaxHttpSocketsPerSession(maxHttpSockets) });
  rpc.addMethod(HttpMethod.request, (params, { conn }) =>
    httpRequestMethod(
      params,
      conn,
      { maxBufferedBodyBytes: state.fs.maxReadFileBytes, memory: (session) => bodiesOf(session as Session), sockets: outgoing },
      () => requireReady(conn, 'http'),
    ),
  );

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
    let session: Session;
    if (p.resumeSessionId) {
      const existing = state.sessions.get(p.resumeSessionId);
      // A session created with another credential is reported unknown: its existence is not revealed.
      if (!existing || existing.isExpired || !existing.ownedBy(conn.credential)) {
        throw invalidRequest(Messages.unknownSession(p.resumeSessionId));
      }
      if (!sameExtensions(extensions, existing.extensions)) {
        throw invalidParams(
          `invalid params for initialize: tether.extensions: a resumed session keeps the extensions it was created with ` +
            `([${[...existing.extensions].join(', ')}]; this request asks for [${extensions.join(', ')}])`,
        );
      }
      if (existing.attached) {
        existing.probeAttached(state.livenessProbeMs);
        throw new RpcError(ErrorCode.SessionAttached, Messages.sessionAttached(p.resumeSessionId));
      }
      session = existing;
      state.monitor.sessionResumed(session, p.clientName);
      state.log('info', `session ${session.shortId} resumed by ${conn.remote} (client ${logfmtValue(p.clientName)})`);
    } else {
      if (state.sessions.size >= state.maxSessions) {
        state.monitor.refused('sessions');
        throw invalidRequest(`too many sessions: this server allows at most ${state.maxSessions} (--max-sessions)`);
      }
      const perToken = state.maxSessionsPerToken;
      if (perToken !== undefined && state.shares && state.shares.sessionsOf(shareOwner(conn.credential)) >= perToken) {
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
      session = new Session(randomUUID(), conn.credential, { ...state.limits }, state.sessionHooks, new Set(extensions));
      const created = session;
      created.backend = state.backend.openSession(created, (reason) => lostSession(state, created, reason));
      if (state.shares) session.joinShares(state.shares);
      state.sessions.set(session.id, session);
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

  rpc.addMethod(Method.processStart, async (params, ctx): Promise<ProcessStartResult> => {
    const conn = ctx.conn;
    const p = parseParams(Method.processStart, ProcessStartParamsSchema, params);
    const session = requireReady(conn, 'exec');
    if (p.sandbox !== undefined && p.sandbox !== null) {
      throw invalidParams('invalid params for process/start: sandbox: tether does not sandbox processes; refusing to run with less isolation than requested (send sandbox: null)');
    }
    if (p.enforceManagedNetwork === true) {
      throw invalidParams('invalid params for process/start: enforceManagedNetwork: tether does not sandbox processes and cannot enforce a managed network');
    }
    const cwd = cwdPath(p.cwd);
    if (session.processes.has(p.processId) || session.starting.has(p.processId)) {
      throw invalidRequest(Messages.processExists(p.processId));
    }
    if (session.liveProcessCount >= state.limits.maxProcesses) {
      throw invalidRequest(
        `too many processes: this session already runs ${state.limits.maxProcesses}, the limit (--max-processes)`,
      );
    }
    let handle = 0;
    if (session.extensions.has('binaryOutput')) {
      const claimed = session.claimHandle(p.handle);
      if (typeof claimed === 'string') throw invalidRequest(claimed);
      handle = claimed;
    }
    const admitted = state.capacity?.admit(p.tty, session.outputHeldBack === false) ?? { ticket: () => {} };
    if ('refusal' in admitted) {
      if (handle) session.bindHandle(handle, null);
      state.monitor.refused(admitted.refusal.startsWith('server memory budget') ? 'processMemoryBudget' : 'processCapacity');
      throw internalError(admitted.refusal);
    }
    const noRoom = state.descriptors?.admitStart();
    if (noRoom) {
      admitted.ticket();
      if (handle) session.bindHandle(handle, null);
      throw internalError(noRoom);
    }
    session.starting.add(p.processId);
    let started: ManagedProcess | null = null;
    /** Started and known to the session by its id (what its handle then stands for). */
    let registered: ManagedProcess | null = null;
    try {
      const proc = await ManagedProcess.start(
        {
          processId: p.processId,
          argv: p.argv,
          cwd,
          cwdUri: p.cwd,
          env: p.env,
          envPolicy: p.envPolicy,
          tty: p.tty,
          pipeStdin: p.pipeStdin ?? false,
          arg0: p.arg0,
          // The extension's member: a client that did not negotiate it gets Codex's 80x24.
          terminalSize: session.extensions.has('processResize') ? p.terminalSize : undefined,
          limits: session.limits.output,
          clientAcks: session.clientAcks,
          memory: state.memory,
          handle,
        },
        session,
        session.backend,
      ).catch((err: unknown) => {
        state.monitor.processStartFailed(session, p.processId, p.argv, err instanceof Error ? err.message : String(err));
        // The failure's detail is an extension: a Codex client gets Codex's error exactly.
        if (err instanceof RpcError && err.data !== undefined && !session.extensions.has('startErrorDetail')) throw new RpcError(err.code, err.message);
        throw err;
      });
      started = proc;
      // Its room on the server is taken until its keeper is gone (descendants included).
      void proc.whenGone.then(admitted.ticket);
      if (session.isExpired) {
        proc.killTree();
        throw invalidRequest(Messages.unknownSession(session.id));
      }
      session.processes.set(p.processId, proc);
      registered = proc;
      session.track(proc);
      state.monitor.processStarted(session, proc, p.argv);
      // Its events follow the answer that tells the client the process exists.
      ctx.afterReply = () => proc.announce();
      state.log('debug', `session ${session.shortId} started ${logfmtValue(p.processId)} (pid ${proc.pid}): ${JSON.stringify(p.argv)}`);
    } finally {
      session.starting.delete(p.processId);
      state.descriptors?.startDone();
      if (!started) admitted.ticket();
      if (handle) session.bindHandle(handle, registered);
    }
    // Only a session with binaryOutput learns of handles: a Codex client sees Codex's result.
    return handle ? { processId: p.processId, sandboxType: 'none', handle } : { processId: p.processId, sandboxType: 'none' };
  });

  rpc.addMethod(Method.processRead, async (params, ctx): Promise<ProcessReadResult> => {
    const { conn } = ctx;
    const p = parseParams(Method.processRead, ProcessReadParamsSchema, params);
    const session = requireReady(conn, 'exec');
    const afterSeq = p.afterSeq ?? 0;
    const proc = requireProcess(session, p.processId);
    await proc.waitForNews(afterSeq, Math.min(p.waitMs ?? 0, MAX_WAIT_MS), conn.signal);
    // An answer can carry what the process keeps, up to the read cap (base64: 4/3 of it): a
    // client that asks without reading its answers waits here, so about the high-water mark is
    // queued for it, not one answer per request.
    const answerBytes = Math.min(p.maxBytes ?? Number.POSITIVE_INFINITY, proc.retained, session.limits.output.readCapBytes);
    await conn.reserveAnswer(ctx, Math.ceil((answerBytes * 4) / 3) + 256);
    return proc.read(afterSeq, p.maxBytes ?? null);
  });

  rpc.addMethod(Method.processWrite, async (params, { conn }): Promise<ProcessWriteResult> => {
    const p = parseParams(Method.processWrite, ProcessWriteParamsSchema, params);
    const session = requireReady(conn, 'exec');
    const proc = session.processes.get(p.processId);
    if (!proc) return { status: session.starting.has(p.processId) ? 'starting' : 'unknownProcess' };
    return { status: await proc.write(Buffer.from(p.chunk, 'base64'), p.writeId, p.closeStdin ?? false) };
  });

  rpc.addMethod(Method.processSignal, (params, { conn }) => {
    const p = parseParams(Method.processSignal, ProcessSignalParamsSchema, params);
    const session = requireReady(conn, 'exec');
    session.processes.get(p.processId)?.signal(p.signal);
    return {};
  });

  rpc.addMethod(Method.processTerminate, (params, { conn }): ProcessTerminateResult => {
    const p = parseParams(Method.processTerminate, ProcessTerminateParamsSchema, params);
    const session = requireReady(conn, 'exec');
    const proc = session.processes.get(p.processId);
    return { running: proc ? proc.terminate() : false };
  });

  rpc.addMethod(Method.processResize, (params, { conn }) => {
    if (!conn.session?.extensions.has('processResize')) throw methodNotFound(Method.processResize);
    const p = parseParams(Method.processResize, ProcessResizeParamsSchema, params);
    const session = requireReady(conn, 'exec');
    const proc = requireProcess(session, p.processId);
    if (!proc.tty) throw invalidParams(`invalid params for process/resize: processId: ${p.processId} has no terminal (it was started without tty)`);
    // An exited process has nothing to resize: not an error (a resize can cross an exit).
    if (!proc.closed) proc.resize(p.cols, p.rows);
    return {};
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

  rpc.addMethod(Method.sessionList, async (params, ctx): Promise<SessionListResult> => {
    const { conn } = ctx;
    // Not negotiated: the method does not exist for this session (as for any Codex client).
    if (!conn.session?.extensions.has('sessionList')) throw methodNotFound(Method.sessionList);
    parseParams(Method.sessionList, EmptyParamsSchema, params);
    const session = requireReady(conn, 'exec');
    // The answer is at most MAX_LIST_BYTES (listing.ts): built only once the send buffer has room for it.
    await conn.reserveAnswer(ctx, MAX_LIST_BYTES);
    const admin = state.adminCredential !== null && conn.credential.equals(state.adminCredential);
    return listSessions(state.sessions.values(), state.monitor, { credential: conn.credential, session, admin });
  });

  return rpc;
}
