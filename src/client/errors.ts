/**
 * The client's typed errors. A caller needs exactly two kinds of failure beyond a JSON-RPC
 * error answer (`RpcError`): the whole session is gone (`SessionLostError`), or one process
 * lost output it can never get back (`OutputLostError`).
 */
import { parseCloseNotice, type CloseNotice } from '../protocol/close-reasons.js';

export type SessionLostReason = 'expired' | 'deadline' | 'auth' | 'closed' | 'stopped';

const reasonText: Record<SessionLostReason, string> = {
  expired: 'the server no longer knows the session (it expired or the server restarted)',
  deadline: 'the server could not be reached again before the recovery deadline',
  auth: 'the server refused the credentials',
  closed: 'the client was closed',
  stopped: 'the server stopped, and its processes were killed with the session',
};

/**
 * The session cannot be used any more. One instance is shared by every waiter and every
 * process of the client, so callers can compare by identity and see the same `cause`.
 */
export class SessionLostError extends Error {
  override readonly name: string = 'SessionLostError';
  constructor(
    readonly reason: SessionLostReason,
    options?: { cause?: unknown; sessionId?: string; detail?: string },
  ) {
    const id = options?.sessionId ? ` ${shortId(options.sessionId)}` : '';
    const detail = options?.detail ?? causeText(options?.cause);
    super(`session${id} lost: ${reasonText[reason]}${detail ? ` (${detail})` : ''}`, { cause: options?.cause });
  }
}

/**
 * The server said, as it stopped, that its sessions end with it (close 1001 with tether's
 * reason, docs/protocol.md "When the server stops"): every process of the session was
 * killed, and no reconnect can bring it back. A `SessionLostError` with reason `stopped`.
 */
export class ServerStoppedError extends SessionLostError {
  override readonly name: string = 'ServerStoppedError';
  constructor(options?: { cause?: unknown; sessionId?: string }) {
    super('stopped', { ...options, detail: '' });
  }
}

/** The error a failure with `reason` rejects with (a `ServerStoppedError` for `stopped`). */
export function sessionLostError(reason: SessionLostReason, options?: { cause?: unknown; sessionId?: string }): SessionLostError {
  return reason === 'stopped' ? new ServerStoppedError(options) : new SessionLostError(reason, options);
}

/**
 * Output of one process was evicted by the server before this client could read it, so the
 * stream can no longer be delivered exactly once and in order. Only that process fails.
 * `toSeq` is `Infinity` when the server forgot the process altogether (its closed-process
 * retention ran out), so the end of the loss is unknown.
 */
export class OutputLostError extends Error {
  override readonly name = 'OutputLostError';
  constructor(
    readonly processId: string,
    readonly fromSeq: number,
    readonly toSeq: number,
    detail?: string,
  ) {
    const range = Number.isFinite(toSeq)
      ? fromSeq === toSeq
        ? `event ${fromSeq}`
        : `events ${fromSeq}-${toSeq} (${toSeq - fromSeq + 1} events)`
      : `every event from ${fromSeq} on`;
    super(`process ${processId} lost output: ${range} ${detail ?? 'were evicted by the server before they could be read'}`);
  }
}

/** The socket under a request went away; the client recovers and re-sends (internal). */
export class ConnectionLostError extends Error {
  override readonly name = 'ConnectionLostError';
  constructor(
    message: string,
    readonly generation: number,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/**
 * The server closed the socket with a close frame (internal: a `ConnectionLostError`'s cause,
 * and the reason of a recovery). `notice` is what a tether server said about it as it stopped.
 */
export class PeerClosedError extends Error {
  override readonly name = 'PeerClosedError';
  readonly notice: CloseNotice | null;
  constructor(
    readonly code: number,
    readonly closeReason: string,
  ) {
    super(`connection closed (${code}${closeReason ? ` ${closeReason}` : ''})`);
    this.notice = parseCloseNotice(code, closeReason);
  }
}

/** What the server said as it closed the connection that `error` (or one of its causes) reports. */
export function closeNoticeOf(error: unknown): CloseNotice | null {
  for (let e = error, depth = 0; e instanceof Error && depth < 4; e = e.cause, depth++) {
    if (e instanceof PeerClosedError) return e.notice;
  }
  return null;
}

/** The server answered the WebSocket upgrade with 401/403: retrying cannot help. */
export class AuthRefusedError extends Error {
  override readonly name = 'AuthRefusedError';
  constructor(
    readonly status: number,
    readonly body: string,
  ) {
    super(`server refused the connection with HTTP ${status}${body ? `: ${body}` : ''}`);
  }
}

/**
 * The WebSocket upgrade was answered with a plain HTTP response (not 101, not 401/403). A
 * 429, 502, 503 or 504 says "not now" (a proxy whose upstream restarts, a server at its
 * connection cap): worth another attempt. Any other answer is the server's final word: what
 * answered is not a tether or Codex exec-server at this URL (a web server, a wrong path).
 * The message is one line: the status, and a plain-text body's first line, never an HTML page.
 */
export class UpgradeAnsweredError extends Error {
  override readonly name = 'UpgradeAnsweredError';
  /** Worth another attempt (429, 502, 503, 504). */
  readonly transient: boolean;
  constructor(
    readonly status: number,
    statusText: string,
    contentType: string | undefined,
    /** The first line of a text/plain body; empty for any other body. */
    readonly body: string,
  ) {
    const transient = TRANSIENT_STATUSES.has(status);
    const kind = contentType ? ` (${contentType.split(';')[0]!.trim()})` : '';
    const verdict = body ? `: ${body}` : transient ? '' : `${kind}: not a tether or Codex exec-server at this URL`;
    super(`server answered the WebSocket upgrade with HTTP ${status}${statusText ? ` ${statusText}` : ''}${verdict}`);
    this.transient = transient;
  }
}

/** HTTP answers to an upgrade that mean "try again later". */
const TRANSIENT_STATUSES: ReadonlySet<number> = new Set([429, 502, 503, 504]);

/** Session ids are resume credentials: show only a prefix. */
export function shortId(id: string): string {
  return id.length > 8 ? `${id.slice(0, 8)}…` : id;
}

function causeText(cause: unknown): string {
  if (cause instanceof Error) return cause.message;
  return cause === undefined ? '' : String(cause);
}

/** A resume answered with another session id than ours: that session is gone (internal). */
export class WrongSessionError extends Error {
  override readonly name = 'WrongSessionError';
  constructor(got: unknown) {
    super(`the server resumed a different session (${String(got)})`);
  }
}
