/**
 * The supervisor's call path: a request gets a live connection (joining the attempt in
 * flight or making one at once, never waiting unboundedly), runs bounded by its timeout, and
 * a failure that shows the connection gone becomes a ServerUnavailableError saying why, from
 * the supervisor's view rather than the raw transport error.
 */
import { ResultSchema, type Result } from '@modelcontextprotocol/sdk/types.js';
import type { Connection } from './transport/connection.js';
import { isUndelivered } from './diagnosis.js';
import { errorText, isAuthError, isConnectionClosed, isTransportLoss, ServerUnavailableError } from './errors.js';
import type { FailureKind } from './policy.js';
// Declared with ServerSupervisor, whose public API it is part of (test/api names its file).
import type { CallOptions, ServerStatus } from './types.js';

/** The supervisor's state as a call sees it, read afresh at each step. */
export interface CallState {
  status: ServerStatus;
  /** The live connection, or null. */
  conn: Connection | null;
  attempt: number;
  nextRetryMs: number | null;
  lastError: string | null;
  /** Stopped for a reason no attempt can change (a refused protocol version, credentials). */
  permanent: boolean;
}

/** What the call path needs of its supervisor. */
export interface CallHost {
  readonly name: string;
  readonly requestTimeoutMs: number;
  state(): CallState;
  /** Joins the attempt in flight, or cancels the scheduled retry and tries at once. */
  attemptNow(): Promise<unknown>;
  /** A call showed the connection lost (credentials refused, transport broken). */
  dropConnection(conn: Connection, reason: string, failure: FailureKind): void;
}

export class CallPath {
  constructor(private readonly host: CallHost) {}

  /**
   * Any request to the server. A server that is reconnecting or failed gets an immediate
   * attempt first; if that fails too, the call fails with a ServerUnavailableError. Bounded
   * by `timeoutMs` (default requestTimeoutMs), progress relayed; the result is passed
   * through as the server sent it.
   */
  async request(method: string, params: Record<string, unknown> | undefined, opts: CallOptions = {}): Promise<Result> {
    for (let round = 0; ; round++) {
      const conn = await this.ensureConnected();
      try {
        return await conn.client.request({ method, params } as never, ResultSchema, {
          timeout: opts.timeoutMs ?? this.host.requestTimeoutMs,
          signal: opts.signal,
          ...(opts.onprogress ? { onprogress: opts.onprogress, resetTimeoutOnProgress: true } : {}),
        });
      } catch (err) {
        this.noteCallFailure(conn, err);
        const current = this.host.state().conn;
        // A request the server provably never ran (its HTTP session was gone) is safe to send
        // again once, on a fresh connection: a restarted HTTP server then costs the caller nothing.
        if (round === 0 && current !== conn && isUndelivered(err) && !opts.signal?.aborted) continue;
        // The connection is gone (the SDK runs onclose before failing pending calls): say so
        // with the supervisor's view, not just the raw error.
        if (current !== conn) throw this.unavailable(this.host.state().lastError ?? errorText(err));
        throw err;
      }
    }
  }

  /** Resolves with a live connection or throws ServerUnavailableError; never waits unboundedly. */
  private async ensureConnected(): Promise<Connection> {
    const before = this.host.state();
    if (before.status === 'connected' && before.conn) return before.conn;
    // The tether server refuses connections: say so now rather than wait for the session's
    // recovery deadline (a new session would not help while nobody listens).
    if (before.conn?.linkDown) throw this.unavailable();
    if (before.status === 'connecting' || before.status === 'reconnecting' || (before.status === 'failed' && !before.permanent)) {
      // Joins the attempt in flight, or cancels the scheduled retry and tries at once: one
      // attempt per call, bounded by connectTimeoutMs.
      await this.host.attemptNow();
      const after = this.host.state();
      if (after.status === 'connected' && after.conn) return after.conn;
    }
    throw this.unavailable();
  }

  private unavailable(lastError?: string): ServerUnavailableError {
    const { status, attempt, nextRetryMs, lastError: last } = this.host.state();
    return new ServerUnavailableError(this.host.name, status, attempt, nextRetryMs, lastError ?? last);
  }

  /** A real call failed: an authorization error or a broken transport means reconnect policy applies. */
  private noteCallFailure(conn: Connection, err: unknown): void {
    if (conn !== this.host.state().conn) return;
    if (isAuthError(err)) this.host.dropConnection(conn, errorText(err), 'auth');
    // ConnectionClosed is left to the transport's own close, which knows whether it was a crash.
    else if (isTransportLoss(err) && !isConnectionClosed(err)) this.host.dropConnection(conn, errorText(err), 'loss');
  }
}
