/**
 * tether-exec: remote process execution over WebSocket sessions that survive network drops.
 *
 * The public API (also importable one part at a time, which loads less:
 * `tether-exec/client`, `/mcp`, `/server`, `/gateway`, `/chaos`):
 *
 * - the client: `ExecClient.connect(url, options)` → `client.spawn(argv)` gives an
 *   `ExecProcess` shaped like Node's ChildProcess, kept through drops; the typed failures
 *   `SessionLostError` (the session is gone) and `OutputLostError` (one process lost output);
 * - the MCP transport: `ExecStdioClientTransport`, an `@modelcontextprotocol/sdk` Transport
 *   that runs a stdio MCP server on a tether server;
 * - the server: `startServer(options)` → `TetherServer` (`url`, `close()`);
 * - the gateway: one MCP server in front of many (`Gateway`, `loadConfigFile`,
 *   `createGatewayServer`, `startGatewayHttp`);
 * - the chaos proxy: `ChaosProxy`, the flaky link for tests.
 *
 * Everything else under dist/ is internal and may change in any release.
 */
export {
  ExecClient,
  ExecProcess,
  SessionLostError,
  ServerStoppedError,
  OutputLostError,
  AuthRefusedError,
  type ClientState,
  type ExecClientEventMap,
  type ExecClientOptions,
  type ExecProcessEventMap,
  type KillSignal,
  type RecoveredEvent,
  type RestartingEvent,
  type SessionKeep,
  type SpawnOptions,
  type StateChange,
  type ProcessEvent,
  type SessionLostReason,
  type TrustedCa,
} from './client/index.js';
export { ExecStdioClientTransport, ServerProcessExitedError, type ExecStdioServerParameters, type StderrMode } from './mcp/index.js';
export { startServer, TetherServer, InsecureConfigError, Defaults as ServerDefaults, type TetherServerOptions, type TetherServerEvents, type ConnectionInfo, type LogLevel } from './server/index.js';
export {
  Gateway,
  ConfigError,
  loadConfigFile,
  parseConfig,
  createGatewayServer,
  startGatewayHttp,
  type GatewayConfig,
  type GatewayServerConfig,
  type GatewayOptions,
  type GatewayEvent,
  type GatewayHttp,
  type GatewayHttpOptions,
} from './gateway/index.js';
export { ChaosProxy } from './chaos/index.js';
export { RpcError, ErrorCode, type StartErrorDetail } from './protocol/index.js';
export type { Logger } from './util/logger.js';
