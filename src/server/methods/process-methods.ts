/**
 * The process methods (docs/protocol.md, "Processes"): `process/start` within the session's,
 * the server's and the descriptor caps (the back-end starts the child), `process/read` (a
 * long poll, its answer reserved in the send buffer first), `process/write`, `/signal`,
 * `/terminate` and `/resize`.
 */
import { setTimeout as delay } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import type { JSONRPCServer } from 'json-rpc-2.0';
import {
  Messages,
  Method,
  ProcessReadParamsSchema,
  ProcessSignalParamsSchema,
  ProcessStartParamsSchema,
  ProcessTerminateParamsSchema,
  ProcessResizeParamsSchema,
  ProcessWriteParamsSchema,
  RpcError,
  internalError,
  invalidParams,
  invalidRequest,
  methodNotFound,
  parseParams,
} from '../../protocol/index.js';
import type { ProcessReadResult, ProcessStartResult, ProcessTerminateResult, ProcessWriteResult } from '../../protocol/index.js';
import type { Logger } from '../../util/logger.js';
import type { ConnectionContext } from '../connection/index.js';
import type { ProcessCapacity, DescriptorBudget, MemoryBudget } from '../memory/index.js';
import { requireProcess, requireReady } from './method-guards.js';
import { watcherMaxBytes, watcherTurn } from './watcher-turn.js';
import { listedArgv, logfmtValue, type ServerMonitor, type Session, type SessionLimits } from '../session/index.js';
import { ManagedProcess, type SpawnSpec } from '../output/index.js';

/** What a server with a state dir (restart adoption, restart/kept-server.ts) does for the process methods. */
export interface ProcessKeeping {
  /** How a new process of `session` is kept: its keeper's socket, timer, cap and meta. */
  keepOptions(session: Session, p: { processId: string; handle: number; argv: string[]; tty: boolean; pipeStdin: boolean }): SpawnSpec['keep'];
  /** Where a kept process's output past its window goes (the state dir's disk, within its quota). */
  spillFor?(session: Session, keep: NonNullable<SpawnSpec['keep']>): SpawnSpec['spill'];
  /** `session`'s record follows its changes. */
  save(session: Session): void;
}

/** What the process methods use of the server. */
export interface ProcessMethodsState {
  limits: Pick<SessionLimits, 'maxProcesses'>;
  /** The server-wide process and pty caps (and the memory budget) for process/start. */
  capacity?: Pick<ProcessCapacity, 'admit'>;
  /** Admits process starts within the descriptor limit. */
  descriptors?: Pick<DescriptorBudget, 'admitStart' | 'startDone'>;
  /** The server-wide memory budget each process's output is counted in. */
  memory?: MemoryBudget;
  log: Logger;
  monitor: ServerMonitor;
  /** A state dir (restart adoption): every process is kept, its session's record follows. */
  kept?: ProcessKeeping;
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

export function registerProcessMethods(rpc: JSONRPCServer<ConnectionContext>, state: ProcessMethodsState): void {
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
    // The keeper's meta (read back by a successor) holds the argv as listed, not megabytes of it.
    const keep = state.kept?.keepOptions(session, { processId: p.processId, handle, argv: listedArgv(p.argv).argv, tty: p.tty, pipeStdin: p.pipeStdin ?? false });
    const spill = keep ? state.kept?.spillFor?.(session, keep) : undefined;
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
          keep,
          ...(spill ? { spill } : {}),
          // Extension `keepLast`: without it the member is ignored (the process pauses, as always).
          ...(session.extensions.has('keepLast') && p.keepLastBytes ? { keepLastBytes: p.keepLastBytes } : {}),
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
        // Nothing will ever read it, or release its keeper: both now, as an expiry does.
        proc.killTree();
        proc.release();
        throw invalidRequest(Messages.unknownSession(session.id));
      }
      session.processes.set(p.processId, proc);
      registered = proc;
      session.track(proc);
      state.kept?.save(session);
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
    // A watcher (extension `attach`) reads its watched session's processes, acknowledging nothing.
    requireReady(conn, 'exec');
    const watcher = conn.session === null;
    const session = conn.session ?? conn.watching!;
    const afterSeq = p.afterSeq ?? 0;
    const proc = requireProcess(session, p.processId);
    await proc.waitForNews(afterSeq, Math.min(p.waitMs ?? 0, MAX_WAIT_MS), conn.signal);
    let maxBytes = p.maxBytes ?? null;
    if (watcher) {
      // Watchers yield to the writer (watcher-turn.ts): while it streams, a watcher's answer
      // waits its turn and is small, so a hundred watchers cannot slow the writer's stream.
      // Streaming: the writer has output of it not yet sent, or sent and not yet acknowledged.
      const streaming = () => session.attached && (proc.unsent > 0 || proc.unacknowledged > 0);
      const turn = watcherTurn(streaming(), session.watchers);
      if (turn.waitMs > 0) await delay(turn.waitMs, undefined, { signal: conn.signal }).catch(() => {});
      maxBytes = watcherMaxBytes(maxBytes, watcherTurn(streaming()));
    }
    // An answer can carry what the process keeps, up to the read cap (base64: 4/3 of it): a
    // client that asks without reading its answers waits here, so about the high-water mark is
    // queued for it, not one answer per request.
    // Spilled output is read back from disk into the answer too (a watcher's read from seq 0, a reader behind).
    const answerBytes = Math.min(maxBytes ?? Number.POSITIVE_INFINITY, proc.retained + proc.spilled, session.limits.output.readCapBytes);
    await conn.reserveAnswer(ctx, Math.ceil((answerBytes * 4) / 3) + 256);
    return watcher ? proc.watchRead(afterSeq, maxBytes) : proc.read(afterSeq, maxBytes);
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

}
