/**
 * Registers the filesystem family (`fs/*`, `environmentConfig/read`) on the server's JSON-RPC
 * server. Each handler follows Codex's order: params first (-32602, including the URIs and
 * tether's refusal of a sandbox), then the handshake state, then the work, whose OS errors
 * become Codex's codes and texts (errors.ts). Memory is bounded by the server's fs budget:
 * reads wait for the connection's send buffer to drain and for budget before they read.
 */
import type { JSONRPCServer } from 'json-rpc-2.0';
import type { z } from 'zod';
import {
  EnvironmentConfigReadParamsSchema,
  FsCloseParamsSchema,
  FsCopyParamsSchema,
  FsCreateDirectoryParamsSchema,
  FsLimits,
  FsMethod,
  FsOpenParamsSchema,
  FsPathParamsSchema,
  FsReadBlockParamsSchema,
  FsRemoveParamsSchema,
  FsWalkParamsSchema,
  FsWatchMissingParamsSchema,
  FsWriteBlockParamsSchema,
  FsWriteFileParamsSchema,
  FsWrittenParamsSchema,
  Base64Text,
  internalError,
  invalidParams,
  invalidRequest,
  methodNotFound,
  parseParams,
  type EnvironmentConfigReadResult,
  type FsMetadata,
  type FsReadBlockResult,
  type FsReadDirectoryResult,
  type FsReadFileResult,
  type FsWalkResult,
  type FsWatchMissingResult,
  type FsWrittenResult,
} from '../../protocol/index.js';
import type { Connection, ConnectionContext } from '../connection/index.js';
import type { Session } from '../session/index.js';
import { decodeBase64 } from './base64.js';
import { ByteBudget } from './budget.js';
import { Limiter, OpenFileCount } from './limiter.js';
import { MAX_CONFIG_ANSWER_BYTES, MAX_CONFIG_FILE_BYTES } from './environment-config.js';
import { fsError, mapFsErrors } from './errors.js';
import { checkBlockLength, checkHandleId } from './handle-ids.js';
import { FsConnectionState, FsSessionState } from './scope.js';
import type { FsTarget, KeptFsRecord } from '../backend/index.js';
import type { ResultJournal } from './results.js';
import { parsePathUri } from './uri.js';
import { checkWalkLimits } from './walk-limits.js';

export interface FsServerLimits {
  /** Largest file fs/readFile answers (8 MiB); larger ones are read with fs/open + fs/readBlock. */
  maxReadFileBytes: number;
  /** Open file handles per connection, or per session with `fsResume` (128, Codex's number). */
  maxHandles: number;
  /** Bytes of file data all fs requests of the server may hold at once (64 MiB). */
  memoryBytes: number;
  /** Entries fs/readDirectory answers at most (100 000). */
  maxDirectoryEntries: number;
  /** Paths one fs/watchMissing may name (1024). */
  maxWatchPaths: number;
  /** Idempotency keys remembered per session (4096). */
  rememberedResults: number;
  /** File handles open at once across all sessions (an eighth of the descriptor limit, at most 4096). */
  maxOpenFiles: number;
  /** fs operations running at once across the server (each may hold a descriptor; 256). */
  maxOperations: number;
}

export const FsDefaults: FsServerLimits = {
  maxReadFileBytes: 8 * 1024 * 1024,
  maxHandles: FsLimits.maxHandles,
  memoryBytes: 64 * 1024 * 1024,
  maxDirectoryEntries: 100_000,
  maxWatchPaths: 1024,
  rememberedResults: 4096,
  maxOpenFiles: 4096,
  maxOperations: 256,
};

/** What one session may hold of the fs data budget: a quarter, or one whole file read if more. */
export function sessionShare(total: number, maxReadFileBytes: number): number {
  return Math.min(total, Math.max(Math.floor(total / 4), maxReadFileBytes));
}

export type FsFamily = 'filesystem' | 'environment config';

export interface FsRegistration {
  /** `initialized` arrived on `conn` (a watch change seen while detached is told now). */
  connectionReady(conn: Connection): void;
  /** A successor server rebuilt `session`: its fs state as the predecessor recorded it (restart adoption). */
  restore(session: Session, record: KeptFsRecord): void;
}

/** Requests waiting for budget or a drained send buffer, per connection; above this the socket stops being read. */
const MAX_WAITING_PER_CONNECTION = 16;

export function registerFsMethods(
  rpc: JSONRPCServer<ConnectionContext>,
  limits: FsServerLimits,
  requireReady: (conn: Connection, family: FsFamily) => Session,
  /** The bytes file data may hold, a share at most per session (`sessionShare`); default: `limits.memoryBytes` of its own. */
  budget: ByteBudget = new ByteBudget(limits.memoryBytes, undefined, sessionShare(limits.memoryBytes, limits.maxReadFileBytes)),
  /** A state dir (restart adoption): the session's idempotency-key journal, so keys outlive the server. */
  journalOf: (session: Session) => ResultJournal | null = () => null,
  /** A state dir: `session.keptFs` changed, its record is to be written. */
  recordChanged: (session: Session) => void = () => {},
): FsRegistration {
  const openFiles = new OpenFileCount(limits.maxOpenFiles);
  const operations = new Limiter(limits.maxOperations);
  const scopeLimits = { maxHandles: limits.maxHandles, openFiles };
  const sessions = new WeakMap<Session, FsSessionState>();
  const connections = new WeakMap<Connection, FsConnectionState>();
  const waiting = new WeakMap<Connection, number>();

  function sessionState(session: Session): FsSessionState {
    let state = sessions.get(session);
    if (!state) {
      const created = new FsSessionState(session, { ...scopeLimits, rememberedResults: limits.rememberedResults }, session.extensions.has('fsResume') ? journalOf(session) : null, recordChanged);
      state = created;
      sessions.set(session, created);
      session.onExpired(() => void created.close());
    }
    return state;
  }

  function connectionState(conn: Connection): FsConnectionState {
    let state = connections.get(conn);
    if (!state) {
      state = new FsConnectionState(conn, scopeLimits);
      connections.set(conn, state);
    }
    return state;
  }

  /** The handshake check and the session's fs state. */
  function ready(conn: Connection): { session: Session; fs: FsSessionState } {
    const session = requireReady(conn, 'filesystem');
    return { session, fs: sessionState(session) };
  }

  /**
   * Waits (bounded) for the connection's send buffer to drain and for `bytes` of budget. A
   * client that keeps asking without reading its answers stops being read itself.
   */
  async function admit(conn: Connection, bytes: number): Promise<() => void> {
    const count = (waiting.get(conn) ?? 0) + 1;
    waiting.set(conn, count);
    if (count === MAX_WAITING_PER_CONNECTION) conn.pauseReading('fs');
    try {
      for (;;) {
        await conn.whenDrained();
        const release = await budget.acquire(bytes, conn.signal, conn.session ?? undefined);
        // The buffer may have filled while this request waited for budget: then wait again.
        if (!conn.backpressured || conn.closed) return release;
        release();
      }
    } finally {
      const left = (waiting.get(conn) ?? 1) - 1;
      waiting.set(conn, left);
      if (left === MAX_WAITING_PER_CONNECTION - 1) conn.resumeReading('fs');
    }
  }

  /** Refuses a read whose answer (`bytes` of data, in base64) would take the session past its share of a pressed memory budget. */
  function refuseOverShare(session: Session, bytes: number): void {
    const refusal = session.answerRefusal(Math.ceil((bytes * 4) / 3));
    if (refusal) throw internalError(refusal);
  }

  /** Runs a mutating request once per idempotency key when the session negotiated `fsResume`. */
  function once<T>(fs: FsSessionState, session: Session, method: string, params: { idempotencyKey?: string | null }, operation: () => Promise<T>): Promise<T> {
    const { idempotencyKey, ...rest } = params;
    if (!idempotencyKey || !session.extensions.has('fsResume')) return operation();
    return fs.results.run(idempotencyKey, method, rest, operation);
  }

  /** Params, with tether's refusal of a sandbox (it never runs with less isolation than asked for). */
  function params<S extends z.ZodType>(method: string, schema: S, raw: unknown): z.infer<S> {
    const p = parseParams(method, schema, raw) as z.infer<S> & { sandbox?: unknown };
    if (p.sandbox !== undefined && p.sandbox !== null) {
      throw invalidParams(
        `invalid params for ${method}: sandbox: tether does not sandbox filesystem access; refusing to run with less isolation than requested (send sandbox: null)`,
      );
    }
    return p;
  }

  const pathOf = (uri: string): FsTarget => ({ uri, path: parsePathUri(uri) });
  /** The OS work of a request: at most `maxOperations` at once server-wide, errors in Codex's form. */
  const work = <T>(operation: () => Promise<T>): Promise<T> => operations.run(() => mapFsErrors(operation));

  rpc.addMethod(FsMethod.readFile, async (raw, { conn }): Promise<FsReadFileResult> => {
    const p = params(FsMethod.readFile, FsPathParamsSchema, raw);
    const path = pathOf(p.path);
    const { session } = ready(conn);
    // Wait for the send buffer before taking an operation slot: a client that does not read
    // its answers must not hold slots other sessions need. Inside, only the byte budget waits.
    await conn.whenDrained();
    const { data, release } = await work(() =>
      session.backend.fs.readFile(path, limits.maxReadFileBytes, (bytes) => {
        refuseOverShare(session, bytes);
        return budget.acquire(bytes, conn.signal, session);
      }),
    );
    try {
      return { dataBase64: new Base64Text(data.toString('base64')) as unknown as string };
    } finally {
      release();
    }
  });

  rpc.addMethod(FsMethod.writeFile, async (raw, { conn }): Promise<Record<string, never>> => {
    const p = params(FsMethod.writeFile, FsWriteFileParamsSchema, raw);
    const path = pathOf(p.path);
    const { session, fs } = ready(conn);
    return once(fs, session, FsMethod.writeFile, p, async () => {
      const release = await admit(conn, Math.ceil((p.dataBase64.length * 3) / 4));
      try {
        const decoded = decodeBase64(p.dataBase64);
        if (!decoded.ok) throw invalidRequest(`${FsMethod.writeFile} requires valid base64 dataBase64: ${decoded.message}`);
        await work(() => session.backend.fs.writeFile(path, decoded.bytes));
        return {};
      } finally {
        release();
      }
    });
  });

  rpc.addMethod(FsMethod.createDirectory, async (raw, { conn }) => {
    const p = params(FsMethod.createDirectory, FsCreateDirectoryParamsSchema, raw);
    const path = pathOf(p.path);
    const { session, fs } = ready(conn);
    return once(fs, session, FsMethod.createDirectory, p, async () => {
      await work(() => session.backend.fs.createDirectory(path, p.recursive ?? true));
      return {};
    });
  });

  rpc.addMethod(FsMethod.getMetadata, async (raw, { conn }): Promise<FsMetadata> => {
    const p = params(FsMethod.getMetadata, FsPathParamsSchema, raw);
    const path = pathOf(p.path);
    const { session } = ready(conn);
    return work(() => session.backend.fs.getMetadata(path));
  });

  rpc.addMethod(FsMethod.readDirectory, async (raw, { conn }): Promise<FsReadDirectoryResult> => {
    const p = params(FsMethod.readDirectory, FsPathParamsSchema, raw);
    const path = pathOf(p.path);
    const { session } = ready(conn);
    await conn.whenDrained();
    return { entries: await work(() => session.backend.fs.readDirectory(path, limits.maxDirectoryEntries)) };
  });

  rpc.addMethod(FsMethod.canonicalize, async (raw, { conn }) => {
    const p = params(FsMethod.canonicalize, FsPathParamsSchema, raw);
    const path = pathOf(p.path);
    const { session } = ready(conn);
    return { path: await work(() => session.backend.fs.canonicalize(path)) };
  });

  rpc.addMethod(FsMethod.walk, async (raw, { conn }): Promise<FsWalkResult> => {
    const p = params(FsMethod.walk, FsWalkParamsSchema, raw);
    const path = pathOf(p.path);
    const { session } = ready(conn);
    checkWalkLimits(p.options);
    await conn.whenDrained();
    return work(() => session.backend.fs.walk(path, p.options));
  });

  rpc.addMethod(FsMethod.remove, async (raw, { conn }) => {
    const p = params(FsMethod.remove, FsRemoveParamsSchema, raw);
    const path = pathOf(p.path);
    const { session, fs } = ready(conn);
    return once(fs, session, FsMethod.remove, p, async () => {
      await work(() => session.backend.fs.remove(path, p.recursive ?? true, p.force ?? true));
      return {};
    });
  });

  rpc.addMethod(FsMethod.copy, async (raw, { conn }) => {
    const p = params(FsMethod.copy, FsCopyParamsSchema, raw);
    const source = pathOf(p.sourcePath);
    const destination = pathOf(p.destinationPath);
    const { session, fs } = ready(conn);
    return once(fs, session, FsMethod.copy, p, async () => {
      await work(() => session.backend.fs.copy(source, destination, p.recursive));
      return {};
    });
  });

  rpc.addMethod(FsMethod.open, async (raw, { conn }) => {
    const p = params(FsMethod.open, FsOpenParamsSchema, raw);
    const path = pathOf(p.path);
    const { session, fs } = ready(conn);
    return once(fs, session, FsMethod.open, p, async () => {
      checkHandleId(p.handleId);
      await work(() => session.backend.fs.openFile(connectionState(conn).scope(fs), p.handleId, path, p.mode ?? 'read'));
      return { handleId: p.handleId };
    });
  });

  rpc.addMethod(FsMethod.readBlock, async (raw, { conn }): Promise<FsReadBlockResult> => {
    const p = params(FsMethod.readBlock, FsReadBlockParamsSchema, raw);
    const { session, fs } = ready(conn);
    checkHandleId(p.handleId);
    checkBlockLength(p.len, 'read');
    refuseOverShare(conn.session!, p.len);
    const release = await admit(conn, p.len);
    try {
      const block = await work(() => session.backend.fs.readBlock(connectionState(conn).scope(fs), p.handleId, p.offset, p.len));
      return { chunk: new Base64Text(block.bytes.toString('base64')) as unknown as string, eof: block.eof };
    } finally {
      release();
    }
  });

  rpc.addMethod(FsMethod.writeBlock, async (raw, { conn }) => {
    const p = params(FsMethod.writeBlock, FsWriteBlockParamsSchema, raw);
    const decoded = decodeBase64(p.chunk);
    if (!decoded.ok) throw invalidParams(decoded.message);
    const { session, fs } = ready(conn);
    checkHandleId(p.handleId);
    checkBlockLength(decoded.bytes.length, 'write');
    const writeId = session.extensions.has('fsWritten') ? (p.writeId ?? undefined) : undefined;
    const release = await admit(conn, decoded.bytes.length);
    try {
      await work(() => session.backend.fs.writeBlock(connectionState(conn).scope(fs), p.handleId, p.offset, decoded.bytes, writeId));
      return {};
    } finally {
      release();
    }
  });

  rpc.addMethod(FsMethod.written, async (raw, { conn }): Promise<FsWrittenResult> => {
    if (!conn.session?.extensions.has('fsWritten')) throw methodNotFound(FsMethod.written);
    const p = params(FsMethod.written, FsWrittenParamsSchema, raw);
    if (p.writeIds.length > FsLimits.maxWriteIds) {
      throw invalidParams(`invalid params for ${FsMethod.written}: writeIds: at most ${FsLimits.maxWriteIds} ids (got ${p.writeIds.length})`);
    }
    const { session, fs } = ready(conn);
    return { writeIds: await session.backend.fs.completedWrites(connectionState(conn).scope(fs), p.handleId, p.writeIds) };
  });

  rpc.addMethod(FsMethod.close, async (raw, { conn }) => {
    const p = params(FsMethod.close, FsCloseParamsSchema, raw);
    const { session, fs } = ready(conn);
    await work(() => session.backend.fs.closeFile(connectionState(conn).scope(fs), p.handleId));
    return {};
  });

  rpc.addMethod(FsMethod.watchMissing, async (raw, { conn }): Promise<FsWatchMissingResult> => {
    const p = params(FsMethod.watchMissing, FsWatchMissingParamsSchema, raw);
    if (p.missing.length > limits.maxWatchPaths) {
      throw invalidParams(`invalid params for ${FsMethod.watchMissing}: missing: at most ${limits.maxWatchPaths} paths (got ${p.missing.length})`);
    }
    const missing = p.missing.map(pathOf);
    const present = p.present ? pathOf(p.present) : null;
    const { session, fs } = ready(conn);
    const own = connectionState(conn);
    if (own.usedWatchIds.has(p.watchId)) return { watching: false };
    own.usedWatchIds.add(p.watchId);
    try {
      return { watching: await session.backend.fs.watchMissing(own.scope(fs), p.watchId, missing, present) };
    } catch (err) {
      throw fsError(err);
    }
  });

  rpc.addMethod(FsMethod.environmentConfigRead, async (raw, ctx): Promise<EnvironmentConfigReadResult> => {
    const { conn } = ctx;
    const p = parseParams(FsMethod.environmentConfigRead, EnvironmentConfigReadParamsSchema, raw);
    pathOf(p.cwd);
    const session = requireReady(conn, 'environment config');
    // Built only once the send buffer has room for the largest answer, and the file read
    // (at most MAX_CONFIG_FILE_BYTES) holds file-data budget meanwhile.
    await conn.reserveAnswer(ctx, MAX_CONFIG_ANSWER_BYTES + 64 * 1024);
    const release = await budget.acquire(MAX_CONFIG_FILE_BYTES + 1, conn.signal);
    try {
      return await session.backend.environmentConfig(p.configPaths, p.requirementsPaths, p.cwd);
    } finally {
      release();
    }
  });

  return {
    connectionReady(conn) {
      if (conn.session) sessionState(conn.session).connectionReady(conn);
    },
    restore(session, record) {
      sessionState(session).restore(record);
    },
  };
}
