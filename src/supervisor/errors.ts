import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';
import { StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { ServerStatus } from './types.js';

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
  if (e.name === 'UnauthorizedError' || e.name === 'AuthRefusedError' || e instanceof CredentialsUnavailableError) return true;
  // StreamableHTTPError carries the HTTP status in `code`; tether's SessionLostError says 'auth'.
  if (e.code === 401 || e.code === 403 || e.status === 401 || e.status === 403) return true;
  if (e.name === 'SessionLostError' && e.reason === 'auth') return true;
  // ws reports a refused upgrade as "Unexpected server response: 401".
  if (/Unexpected server response: 40[13]\b/.test(e.message)) return true;
  if (/\b(unauthori[sz]ed|forbidden|authentication (failed|required)|invalid token)\b/i.test(e.message)) return true;
  const cause = (e as { cause?: unknown }).cause;
  return cause !== undefined && cause !== err && isAuthError(cause);
}

/** The peer went away (connection closed, process gone). */
export function isConnectionClosed(err: unknown): boolean {
  return err instanceof McpError && err.code === ErrorCode.ConnectionClosed;
}

export function isRequestTimeout(err: unknown): boolean {
  return err instanceof McpError && err.code === ErrorCode.RequestTimeout;
}

export function isMethodNotFound(err: unknown): boolean {
  return err instanceof McpError && err.code === ErrorCode.MethodNotFound;
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
  if (/\b(ECONNREFUSED|EHOSTUNREACH|ENETUNREACH|ENOTFOUND)\b/.test(e.message)) return true;
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
  if (e.name === 'SessionLostError' || e.name === 'ConnectionLostError') return true;
  if (err instanceof StreamableHTTPError) {
    return e.code === 404 || e.code === 502 || e.code === 503 || e.code === 504 || e.code === undefined;
  }
  if (typeof e.code === 'string' && NETWORK_CODES.has(e.code)) return true;
  if (e.name === 'TypeError' && /fetch failed|terminated|network/i.test(e.message)) return true;
  if (/Not connected|socket hang up|other side closed/i.test(e.message)) return true;
  return e.cause instanceof Error && e.cause !== err && isTransportLoss(e.cause);
}
