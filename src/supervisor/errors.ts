import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';
import { StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { AuthRefusedError, ConnectionLostError, SessionLostError } from '../client/errors.js';
import type { ServerStatus } from './types.js';

/*
 * tether's own failures are classes (client/errors.ts, protocol/errors.ts, mcp/): they are
 * told apart with instanceof and their fields, never by their text. Text is matched only
 * where the error is foreign (ws, Node, undici, the MCP SDK, a server's own words), and each
 * such pattern is one constant here, saying whose text it is.
 */

/** ws reports a refused upgrade (from another server than tether's) as "Unexpected server response: 401". */
const WS_REFUSED_UPGRADE = /Unexpected server response: 40[13]\b/;
/** What HTTP servers and proxies say when they refuse credentials. */
const AUTH_WORDS = /\b(unauthori[sz]ed|forbidden|authentication (failed|required)|invalid token)\b/i;
/** Node reports these codes in the message only, sometimes (e.g. an AggregateError's summary). */
const REFUSAL_WORDS = /\b(ECONNREFUSED|EHOSTUNREACH|ENETUNREACH|ENOTFOUND)\b/;
/** undici's fetch: a TypeError "fetch failed" / "terminated" / "network error". */
const FETCH_FAILED = /fetch failed|terminated|network/i;
/**
 * A plain Error('Not connected') is the MCP SDK's Protocol (and the transports following its
 * convention) saying the transport is gone; Node's http says "socket hang up", undici "other
 * side closed".
 */
const LINK_GONE = /Not connected|socket hang up|other side closed/i;
/**
 * A protocol version refused: the spec's error code (-32022, "Unsupported protocol version"),
 * or the MCP SDK client's own words when the server answers with a version it does not speak.
 */
const UNSUPPORTED_PROTOCOL_VERSION = -32022;
const SDK_VERSION_REFUSED = /protocol version is not supported|Unsupported protocol version|did not offer pinned protocol version/i;
/** The MCP SDK's own text (above), case as it writes it. */
export const SDK_NOT_CONNECTED = /Not connected/;
/**
 * The MCP SDK's StreamableHTTPClientTransport reports trouble on its SSE stream only through
 * onerror, by text: a 404 "... SSE stream ..." (the server forgot our session), or "Maximum
 * reconnection attempts ..." (it gave up reconnecting the stream).
 */
export const SDK_SSE_STREAM = /SSE stream/;
export const SDK_SSE_GAVE_UP = /Maximum reconnection attempts/;
/**
 * An exec server's refusal to spawn arrives as a JSON-RPC error whose only detail is its
 * message (wire text of the remote tether server's spawn.ts, or of a Codex exec-server): when
 * it begins so, it names the command (or cwd) itself. Used for wording only, never to decide.
 */
export const REMOTE_SPAWN_REFUSAL_PREFIX = 'cannot start ';

/**
 * A call could not reach its MCP server. The message carries everything an agent or a human
 * needs to decide what to do next: the status, the attempt, when the next retry is due and
 * why the last attempt failed.
 */
export class ServerUnavailableError extends Error {
  override name = 'ServerUnavailableError';
  constructor(
    readonly server: string,
    readonly status: ServerStatus,
    readonly attempt: number,
    /** Milliseconds until the next automatic retry, or null when none is scheduled. */
    readonly nextRetryMs: number | null,
    readonly lastError: string | null,
  ) {
    super(describeUnavailable(server, status, attempt, nextRetryMs, lastError));
  }
}

function describeUnavailable(server: string, status: ServerStatus, attempt: number, nextRetryMs: number | null, lastError: string | null): string {
  const parts = [`status ${status}`, `attempt ${attempt}`];
  if (nextRetryMs !== null) parts.push(`next retry in ${(nextRetryMs / 1000).toFixed(1)} s`);
  else if (status === 'failed') parts.push('no automatic retry (use reconnect_server)');
  else if (status === 'requires_reauth') parts.push('no automatic retry: fix the credentials, then use reconnect_server');
  else parts.push('no retry scheduled');
  parts.push(`last error: ${lastError ?? 'none'}`);
  return `MCP server '${server}' is unavailable: ${parts.join(', ')}`;
}

/** The credentials to present could not be read (e.g. tether.tokenFile): needs a human, like a 401. */
export class CredentialsUnavailableError extends Error {
  override name = 'CredentialsUnavailableError';
}

/** The text of any thrown value, one line. */
export function errorText(err: unknown): string {
  if (err instanceof StreamableHTTPError && typeof err.code === 'number') {
    return `HTTP ${err.code}: ${err.message.replace(/^Streamable HTTP error: /, '')}`.replace(/\s+/g, ' ').trim();
  }
  if (err instanceof Error) {
    const cause = (err as { cause?: unknown }).cause;
    const causeText = cause instanceof Error && !err.message.includes(cause.message) ? ` (${cause.message})` : '';
    return `${err.message}${causeText}`.replace(/\s+/g, ' ').trim();
  }
  return String(err);
}

/**
 * 401/403 and their equivalents: retrying with the same credentials cannot help, so the
 * supervisor stops and reports `requires_reauth`.
 */
export function isAuthError(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const e = err as Error & { code?: unknown; status?: unknown; reason?: unknown };
  // UnauthorizedError: the MCP SDK's OAuth failure.
  if (e.name === 'UnauthorizedError' || e instanceof AuthRefusedError || e instanceof CredentialsUnavailableError) return true;
  // StreamableHTTPError carries the HTTP status in `code`; tether's SessionLostError says 'auth'.
  if (e.code === 401 || e.code === 403 || e.status === 401 || e.status === 403) return true;
  if (e instanceof SessionLostError && e.reason === 'auth') return true;
  if (WS_REFUSED_UPGRADE.test(e.message)) return true;
  if (AUTH_WORDS.test(e.message)) return true;
  const cause = (e as { cause?: unknown }).cause;
  return cause !== undefined && cause !== err && isAuthError(cause);
}

/** The server refuses the protocol version offered (no other attempt will change that). */
export function isVersionRefusal(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const code = (err as { code?: unknown }).code;
  if (code === UNSUPPORTED_PROTOCOL_VERSION || code === SDK2.EraNegotiationFailed) return true;
  return SDK_VERSION_REFUSED.test(err.message);
}

/**
 * The SDK v2 (a 2026-07-28 connection's client, modern-client.ts) reports its own failures
 * as SdkError with string codes, and the peer's errors as ProtocolError with the numeric
 * JSON-RPC code; told apart from v1's McpError by those codes.
 */
const SDK2 = {
  ConnectionClosed: 'CONNECTION_CLOSED',
  NotConnected: 'NOT_CONNECTED',
  RequestTimeout: 'REQUEST_TIMEOUT',
  EraNegotiationFailed: 'ERA_NEGOTIATION_FAILED',
} as const;
const codeOf = (err: unknown): unknown => (err instanceof Error ? (err as { code?: unknown }).code : undefined);

/** The peer went away (connection closed, process gone). */
export function isConnectionClosed(err: unknown): boolean {
  if (err instanceof McpError) return err.code === ErrorCode.ConnectionClosed;
  const code = codeOf(err);
  return code === SDK2.ConnectionClosed || code === SDK2.NotConnected;
}

export function isRequestTimeout(err: unknown): boolean {
  if (err instanceof McpError) return err.code === ErrorCode.RequestTimeout;
  return codeOf(err) === SDK2.RequestTimeout;
}

export function isMethodNotFound(err: unknown): boolean {
  if (err instanceof McpError) return err.code === ErrorCode.MethodNotFound;
  return codeOf(err) === ErrorCode.MethodNotFound;
}

const REFUSAL_CODES = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN']);

/**
 * Nobody is listening (or the host is unreachable): not a flaky link that drops a packet but a
 * server that is down (or a tunnel that is being re-established).
 */
export function isRefusal(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const e = err as Error & { code?: unknown; cause?: unknown; errors?: unknown };
  if (typeof e.code === 'string' && REFUSAL_CODES.has(e.code)) return true;
  if (REFUSAL_WORDS.test(e.message)) return true;
  // Node's happy-eyeballs connect reports an AggregateError of the per-address failures.
  if (Array.isArray(e.errors) && e.errors.some(isRefusal)) return true;
  return e.cause instanceof Error && e.cause !== err && isRefusal(e.cause);
}

const NETWORK_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN', 'UND_ERR_SOCKET', 'UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_CLOSED']);

/**
 * A failure that means the connection (not the request) is broken: network errors from fetch,
 * an HTTP server that forgot our session (404) or is failing as a whole (502/503/504), a lost
 * tether session, or a closed transport. The supervisor reconnects on these; a plain MCP error
 * answer from a healthy server is not one of them.
 */
export function isTransportLoss(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  if (isConnectionClosed(err)) return true;
  const e = err as Error & { code?: unknown; cause?: unknown };
  if (e instanceof SessionLostError || e instanceof ConnectionLostError) return true;
  if (err instanceof StreamableHTTPError) {
    return e.code === 404 || e.code === 502 || e.code === 503 || e.code === 504 || e.code === undefined;
  }
  if (typeof e.code === 'string' && NETWORK_CODES.has(e.code)) return true;
  if (e.name === 'TypeError' && FETCH_FAILED.test(e.message)) return true;
  if (LINK_GONE.test(e.message)) return true;
  return e.cause instanceof Error && e.cause !== err && isTransportLoss(e.cause);
}
