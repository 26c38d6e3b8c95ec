/**
 * Why a connection failed: the kind the retry policy acts on (auth, crash, loss), and the
 * one-line explanation a caller and an operator read (`lastError`). tether's own failures are
 * told apart by class and fields; foreign text is matched only in errors.ts.
 */
import { StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ServerStoppedError, SessionLostError } from '../client/errors.js';
import { SERVER_STOPPED_LINE } from '../util/stop-notices.js';
import { RpcError } from '../protocol/errors.js';
import { TimeoutError } from '../util/timeouts.js';
import type { Connection } from './transport/connection.js';
import { errorText, isAuthError, isConnectionClosed, isRequestTimeout, isTransportLoss, isVersionRefusal, REMOTE_SPAWN_REFUSAL_PREFIX, SDK_NOT_CONNECTED, SDK_SSE_GAVE_UP, SDK_SSE_STREAM } from './errors.js';
import type { FailureKind } from './policy.js';
import { summarizeStderr } from './stderr-summary.js';
import { describeExit } from './transport/transports.js';
import type { ServerKind, ServerSpec } from './types.js';

/** The transport closed without reporting an error: the supervisor's stand-in for one. */
export class TransportClosedError extends Error {
  constructor(kind: ServerKind) {
    super(kind === 'http' ? 'connection closed' : 'server process exited');
  }
}

/** The HTTP server answered 404 for our session: it did not run the request. */
export function isUndelivered(err: unknown): boolean {
  return err instanceof StreamableHTTPError && err.code === 404;
}

/**
 * An error the HTTP transport reported on its own (no call failed): the server forgot our
 * session on the SSE stream (404), or the transport gave up reconnecting that stream. Either
 * way the connection is lost. (A 404 answering a POST is left to the call that made it: it
 * may resend once.)
 */
export function isLostSseStream(error: Error): boolean {
  return (isUndelivered(error) && SDK_SSE_STREAM.test(error.message)) || SDK_SSE_GAVE_UP.test(error.message);
}

/** exec-kind failures that mean the tether link (not the MCP server process) went away. */
function isRemoteLoss(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  if (err instanceof SessionLostError) return true;
  return isTransportLoss(err) && !isConnectionClosed(err) && !SDK_NOT_CONNECTED.test(err.message);
}

/**
 * The remote MCP server process ended (mcp/transport.ts's ServerProcessExitedError): its exit
 * code. By name and field, not instanceof: that module loads the tether client, which a
 * gateway without exec servers never loads.
 */
function remoteExitCode(err: unknown): number | undefined {
  if (!(err instanceof Error) || err.name !== 'ServerProcessExitedError') return undefined;
  const code = (err as { exitCode?: unknown }).exitCode;
  return Number.isInteger(code) && (code as number) >= 0 ? (code as number) : undefined;
}

/**
 * A timeout: ours (util/timeouts' TimeoutError, e.g. the connection attempt) or the MCP SDK's
 * request timeout, or one that caused `err` (a lost tether session carries it as its cause).
 */
function isTimeout(err: unknown): boolean {
  for (let e = err, depth = 0; e instanceof Error && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    if (e instanceof TimeoutError || isRequestTimeout(e)) return true;
  }
  return false;
}

/** Why an attempt (or a connection) failed, for the retry policy. */
export function classifyFailure(kind: ServerKind, err: unknown, conn: Connection | undefined): FailureKind {
  const errors = [err, ...(conn?.errors ?? [])];
  if (errors.some(isAuthError)) return 'auth';
  if (errors.some(isVersionRefusal)) return 'refused';
  if (kind === 'http') return 'loss';
  // exec: an unreachable tether server or a lost session is a loss, not a crash of the MCP server.
  if (kind === 'exec' && errors.some(isRemoteLoss)) return 'loss';
  // exec: the tether server answered, but could not start the command (missing binary,
  // bad cwd): the same failure as a local spawn error, so the same crash policy.
  if (kind === 'exec' && errors.some((e) => e instanceof RpcError)) return 'crash';
  const code = (err as { code?: unknown } | undefined)?.code;
  if (code === 'ENOENT' || code === 'EACCES') return 'crash';
  if (conn?.closed && !conn.closedByUs) return 'crash';
  if (isConnectionClosed(err)) return 'crash';
  return 'loss';
}

/** `lastError`: what failed, how the process ended, what it said on stderr / stdout; ≤ 1000 chars. */
export function describeFailure(spec: ServerSpec, err: unknown, conn: Connection | undefined, failure: FailureKind): string {
  const exit = conn ? describeExit(conn.transport) : null;
  const exitCode = remoteExitCode(err);
  const remoteExit = exitCode === undefined ? undefined : `remote MCP server process exited with code ${exitCode}`;
  // "Connection closed" says nothing when we know how the process ended.
  const spawnRefused = spec.kind === 'exec' && err instanceof RpcError;
  // A tether server's message names the command (or the cwd) itself: not twice.
  const refusal = spawnRefused ? errorText(err) : '';
  // (Nor does EPIPE: writing initialize to a process that had already exited.)
  const says = (e: unknown) => isConnectionClosed(e) || e instanceof TransportClosedError || (e as { code?: unknown } | undefined)?.code === 'EPIPE' || (e instanceof Error && SDK_NOT_CONNECTED.test(errorText(e)));
  // The tether server said as it closed that it stopped for good (a close notice): the line `tether exec` prints.
  const stopped = err instanceof ServerStoppedError || (err instanceof Error && err.cause instanceof ServerStoppedError);
  const text = stopped
    ? `${SERVER_STOPPED_LINE} (the tether server said so as it closed)`
    : spawnRefused
    ? refusal.startsWith(REMOTE_SPAWN_REFUSAL_PREFIX)
      ? `the tether server ${refusal}`
      : `the tether server could not start ${JSON.stringify(spec.command)}: ${refusal}`
    : (remoteExit ?? (exit && says(err) ? exit : errorText(err)));
  const parts = [text];
  // A server's stderr usually says why it died or hangs (missing key, bad flag): the error
  // lines, not merely the last line.
  // (Only when the server itself is the suspect: a crash, or an attempt it never answered;
  // a lost link or session says nothing about the server.)
  const suspect = failure === 'crash' || isTimeout(err);
  const said = conn && suspect ? summarizeStderr(conn.stderrTail) : null;
  if (said && !text.includes(said)) parts.push(`stderr: ${said}`);
  if (conn?.invalidStdout.length) {
    parts.push(`the server wrote non-JSON to stdout, where MCP allows only JSON-RPC messages (log to stderr instead): ${conn.invalidStdout.map((l) => JSON.stringify(l.length > 120 ? `${l.slice(0, 120)}…` : l)).join(', ')}`);
  }
  const full = parts.join('; ');
  return full.length > 1000 ? `${full.slice(0, 997)}...` : full;
}
