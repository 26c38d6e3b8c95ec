/** JSON-RPC error codes used on the wire (docs/protocol.md, "Error codes"). */
export const ErrorCode = {
  /** Unparsable JSON (tether; Codex answers -32600 with id -1). */
  ParseError: -32700,
  /** Invalid request or protocol state (not initialized, unknown session, duplicate process...). */
  InvalidRequest: -32600,
  MethodNotFound: -32601,
  /** Invalid params: the message names the field and the reason. */
  InvalidParams: -32602,
  /** Internal error, spawn failure, stdin write failure. */
  InternalError: -32603,
  /** fs/*: the path (or file handle) does not exist; the message is the OS's ("No such file or directory (os error 2)"). */
  NotFound: -32004,
  /** The session is still attached to another connection: clients retry. */
  SessionAttached: -32010,
} as const;

export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];
