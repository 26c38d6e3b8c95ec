/**
 * The one place the client reads a server's error TEXT. Codex's exec-server answers these
 * cases with a bare JSON-RPC -32600 (InvalidRequest) whose message is all that tells them
 * apart; tether's server answers with the same texts (protocol/errors.ts) so one client
 * serves both. Everything else is classified by class or code, never by message (the
 * filesystem's error texts are read in fs-errors.ts alone).
 */
import { ErrorCode } from '../protocol/codes.js';
import { RpcError } from '../protocol/errors.js';

/** Codex "unknown process id <id>" (process/read, /write, /terminate of an id it does not have). */
const UNKNOWN_PROCESS = /unknown process id/i;
/** Codex "process id <id> is starting": a process/read while that id's start is still running. */
const STARTING = /is starting/i;
/** Codex "process <id> already exists": a process/start of an id it has. */
const DUPLICATE_PROCESS = /already exists/i;
/** Codex "unknown session id <id>": initialize with a resumeSessionId it does not know. */
const UNKNOWN_SESSION = /unknown session id/i;

function invalidRequestSaying(err: unknown, text: RegExp): boolean {
  return err instanceof RpcError && err.code === ErrorCode.InvalidRequest && text.test(err.message);
}

/** The server does not know the process (never had it, or forgot it after its close). */
export function isUnknownProcess(err: unknown): boolean {
  return invalidRequestSaying(err, UNKNOWN_PROCESS);
}

/** The process's start is still in progress on the server (Codex): ask again shortly. */
export function isStarting(err: unknown): boolean {
  return invalidRequestSaying(err, STARTING);
}

/** A start refused because the id is taken (after a lost answer: our own earlier start). */
export function isDuplicateProcess(err: unknown): boolean {
  return invalidRequestSaying(err, DUPLICATE_PROCESS);
}

/** A resume refused because the server no longer knows the session. */
export function isUnknownSession(err: unknown): boolean {
  return invalidRequestSaying(err, UNKNOWN_SESSION);
}
