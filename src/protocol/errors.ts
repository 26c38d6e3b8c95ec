import { ErrorCode } from './codes.js';

/**
 * An error that travels on the wire as a JSON-RPC error object. Thrown by method handlers
 * on the server; raised by the client when a request is answered with an error.
 */
export class RpcError extends Error {
  override readonly name = 'RpcError';
  constructor(
    readonly code: number,
    message: string,
    readonly data?: unknown,
  ) {
    super(message);
  }

  toJSON(): { code: number; message: string; data?: unknown } {
    return this.data === undefined
      ? { code: this.code, message: this.message }
      : { code: this.code, message: this.message, data: this.data };
  }
}

export const invalidRequest = (message: string): RpcError => new RpcError(ErrorCode.InvalidRequest, message);
export const invalidParams = (message: string, data?: unknown): RpcError =>
  new RpcError(ErrorCode.InvalidParams, message, data);
export const internalError = (message: string): RpcError => new RpcError(ErrorCode.InternalError, message);
export const methodNotFound = (method: string): RpcError =>
  new RpcError(ErrorCode.MethodNotFound, `method not found: ${method}`);

/** The exact texts of the Codex exec-server (docs/protocol.md), shared by server and tests so they cannot drift. */
export const Messages = {
  notInitialized: 'client must call initialize before using exec methods',
  notInitializedNotified: 'client must send initialized before using exec methods',
  alreadyInitialized: 'initialize may only be sent once per connection',
  unknownSession: (id: string) => `unknown session id ${id}`,
  sessionAttached: (id: string) => `session ${id} is already attached to another connection`,
  unknownProcess: (id: string) => `unknown process id ${id}`,
  processExists: (id: string) => `process ${id} already exists`,
  /** Extension `attach`: `label` is the session's name, or the first 8 characters of its id. */
  writerAttached: (label: string) => `session ${label} has a writer attached: attach with take to move it, or as a watcher`,
  watcherReadOnly: (label: string, verb: string) => `this connection watches session ${label} read-only: attach as the writer (take) to ${verb}`,
  nameInUse: (name: string) => `session name ${name} is in use by another session of this token`,
  nameAmbiguous: (name: string) => `session name ${name} is ambiguous: use the id`,
} as const;
