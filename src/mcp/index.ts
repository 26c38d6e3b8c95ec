/**
 * Stdio MCP servers through tether: an MCP SDK Transport whose server process runs on a
 * tether host and survives link drops, and the bridge behind `tether mcp`.
 */
export { ExecStdioClientTransport, ServerProcessExitedError } from './transport.js';
export type { ExecStdioServerParameters, StderrMode } from './transport.js';
export { runBridge, EXIT_SESSION_LOST, EXIT_START_FAILED } from './bridge.js';
export type { BridgeOptions, BridgeResult } from './bridge.js';
export { JsonRpcLineDecoder, LineSplitter, MessageTooLargeError, serializeMessage } from './framing.js';
