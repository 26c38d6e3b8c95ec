/**
 * Errors as a gateway's hosts see them: JSON-RPC errors whose message is said once, a
 * server's own error passed on with its code, and tool errors (isError) a model reads.
 */
import { ErrorCode, McpError, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { ServerUnavailableError, errorText, isMethodNotFound, type ServerSupervisor } from '../supervisor/index.js';

/** A JSON-RPC error whose message is said once (McpError prefixes "MCP error N:" to it, and the host's SDK does again). */
export function rpcError(code: number, message: string, data?: unknown): Error {
  return Object.assign(new Error(message), { code, data });
}

/** A server's own error answer, passed on with its code, its message said once. */
export function passOn(err: McpError): Error {
  return rpcError(err.code, err.message.replace(/^(MCP error -?\d+: )+/, ''), err.data);
}

/** Runs a request to one server for a host, its errors turned into JSON-RPC errors said once. */
export async function asRpc<T>(server: ServerSupervisor, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof ServerUnavailableError) throw rpcError(ErrorCode.InternalError, err.message);
    if (err instanceof McpError) {
      if (isMethodNotFound(err)) throw rpcError(err.code, `MCP server '${server.name}': ${passOn(err).message}`);
      throw passOn(err);
    }
    throw rpcError(ErrorCode.InternalError, `MCP server '${server.name}': ${errorText(err)}`);
  }
}

export function toolError(text: string): CallToolResult {
  return { isError: true, content: [{ type: 'text', text }] };
}
