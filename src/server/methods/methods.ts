/**
 * The exec-server methods (docs/protocol.md), registered on one shared `json-rpc-2.0` server:
 * the handshake and sessions (session-methods.ts), processes (process-methods.ts), files
 * (fs/methods.ts) and http/request (http-request.ts), with the budgets they share. Handlers
 * throw `RpcError`; `createRpcServer` maps it to the wire error and anything else to -32603.
 */
import { JSONRPCServer, type JSONRPCErrorResponse, type JSONRPCID } from 'json-rpc-2.0';
import { ErrorCode, RpcError, methodNotFound } from '../../protocol/index.js';
import type { ConnectionContext } from '../connection/index.js';
import { type MemoryBudget, defaultMaxHttpSockets, defaultMaxHttpSocketsPerSession } from '../memory/index.js';
import { ByteBudget, registerFsMethods, sessionShare, type FsRegistration, type FsServerLimits } from '../fs/index.js';
import { OutgoingSockets } from './http-sockets.js';
import { HttpMethod, httpRequestMethod } from './http-request.js';
import type { Session, SessionLimits } from '../session/index.js';
import { gateWatchers } from './attach.js';
import { requireReady } from './method-guards.js';
import { registerProcessMethods, type ProcessKeeping, type ProcessMethodsState } from './process-methods.js';
import { registerSessionMethods, type SessionKeeping, type SessionMethodsState } from './session-methods.js';

/** The idempotency-key journal the fs methods keep per session (fs/methods.ts), or null. */
type KeyJournalOf = NonNullable<Parameters<typeof registerFsMethods>[5]>;

/** What a server with a state dir (restart adoption, restart/kept-server.ts) does for the methods. */
export interface MethodsKeeping extends SessionKeeping, ProcessKeeping {
  /** The idempotency-key journal of `session`, remembering `capacity` keys (null: not kept). */
  journalOf(session: Session, capacity: number): ReturnType<KeyJournalOf>;
}

/** What the methods use of the server: each group's state, and what the fs and HTTP methods share. */
export interface MethodsState extends SessionMethodsState, ProcessMethodsState {
  limits: SessionLimits;
  /** The server-wide memory budget: sessions, process output, file data and HTTP bodies are counted there. */
  memory?: MemoryBudget;
  /** Limits of the filesystem methods (server/fs/methods.ts). */
  fs: FsServerLimits;
  /** Outgoing http/request sockets across the server (set aside in the descriptor plan); default derived from the limit. */
  httpSockets?: number;
  /** A state dir (restart adoption): processes are kept, sessions recorded (restart/kept-server.ts). */
  kept?: MethodsKeeping;
}

/** The methods on one `json-rpc-2.0` server, and the fs methods' per-session state (which a restart adoption rebuilds). */
export interface RpcMethods {
  rpc: JSONRPCServer<ConnectionContext>;
  fs: FsRegistration;
}

// Like Codex, every handler validates its params first and checks the handshake state second.
export function createRpcServer(state: MethodsState): RpcMethods {
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
  // Extension `attach`: a watching connection reaches only the methods a watcher may call.
  gateWatchers(rpc);
  registerSessionMethods(rpc, state, fs);
  registerProcessMethods(rpc, state);

  return { rpc, fs };
}

