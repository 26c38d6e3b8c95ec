/**
 * The exec-server methods (docs/protocol.md), registered on one shared `json-rpc-2.0` server:
 * the handshake and sessions (session-methods.ts), processes (process-methods.ts), files
 * (fs/methods.ts) and http/request (http-request.ts), with the budgets they share. Handlers
 * throw `RpcError`; `createRpcServer` maps it to the wire error and anything else to -32603.
 */
import { JSONRPCServer, type JSONRPCErrorResponse, type JSONRPCID } from 'json-rpc-2.0';
import { ErrorCode, RpcError, methodNotFound } from '../../protocol/index.js';
import type { KeptServer } from '../restart/kept-server.js';
import type { ConnectionContext } from '../connection/connection.js';
import type { ProcessCapacity } from '../memory/capacity.js';
import type { DescriptorBudget } from '../memory/descriptors.js';
import type { MemoryBudget } from '../memory/memory-budget.js';
import { ByteBudget } from '../fs/budget.js';
import { registerFsMethods, sessionShare, type FsRegistration, type FsServerLimits } from '../fs/methods.js';
import { defaultMaxHttpSockets, defaultMaxHttpSocketsPerSession } from '../memory/descriptors.js';
import { OutgoingSockets } from './http-sockets.js';
import { HttpMethod, httpRequestMethod } from './http-request.js';
import type { ServerBackend } from '../backend/backend.js';
import type { Session, SessionLimits } from '../session/session.js';
import type { OutputShares } from '../memory/fair-share.js';
import type { Logger } from '../../util/logger.js';
import type { ServerMonitor } from '../session/monitor.js';
import { requireReady } from './method-guards.js';
import { registerProcessMethods } from './process-methods.js';
import { registerSessionMethods } from './session-methods.js';

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
  sessionHooks: { expired(session: Session): void; detached(session: Session): void; processesChanged?(session: Session): void };
  log: Logger;
  /** Counts, facts for `session/list`, and the audit trail. */
  monitor: ServerMonitor;
  /** Digest of the admin token: a connection holding it lists every session. */
  adminCredential: Buffer | null;
  /** Where the work is done (backend.ts): processes, files, HTTP, the host's description. */
  backend: ServerBackend;
  /** A state dir (issue #27): processes are kept, sessions recorded (kept-server.ts). */
  kept?: KeptServer;
  /** Set by createRpcServer: the fs methods' per-session state, which a restore rebuilds. */
  fsRegistration?: FsRegistration;
}

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
  const fs = registerFsMethods(
    rpc,
    state.fs,
    requireReady,
    dataBudget,
    (session) => state.kept?.journalOf(session, state.fs.rememberedResults) ?? null,
    (session) => state.kept?.save(session),
  );
  state.fsRegistration = fs;
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
  registerSessionMethods(rpc, state, fs);
  registerProcessMethods(rpc, state);

  return rpc;
}

