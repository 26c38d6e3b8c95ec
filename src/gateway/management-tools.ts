import { ErrorCode, type CallToolResult, type Tool } from '@modelcontextprotocol/sdk/types.js';
import type { ServerDetail, ServerSummary } from '../supervisor/index.js';
import { rpcError } from './rpc-errors.js';

const serverName = {
  type: 'object' as const,
  properties: { name: { type: 'string', description: 'The server name as configured (the part before __ in tool names)' } },
  required: ['name'],
};
const noArgs = { type: 'object' as const, properties: {} };

/** The gateway's own tools: status and manual recovery of the servers behind it. */
export const managementTools: Tool[] = [
  {
    name: 'list_servers',
    description: 'List the MCP servers behind this gateway with status (connected, reconnecting, failed, requires_reauth…), health, retry attempt, next retry, last error and tools.',
    inputSchema: noArgs,
    annotations: { readOnlyHint: true, openWorldHint: false },
  },
  {
    name: 'get_server_status',
    description: 'Detailed status of one MCP server: status, health, consecutive health failures, attempt, next retry time, last error (also as errorMessage), retryCount, maxRetries, lastRetryTime, recent crashes, capabilities, tools, resources and prompts.',
    inputSchema: serverName,
    annotations: { readOnlyHint: true, openWorldHint: false },
  },
  {
    name: 'reconnect_server',
    description: 'Force a reconnect of one MCP server: a connected server is closed and reconnected, a reconnecting one is tried now, a failed or requires_reauth one has its counters reset and is tried. Returns the status after the attempt.',
    inputSchema: serverName,
    annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: false },
  },
  {
    // The same operation under the name other MCP gateways give it.
    name: 'retry_server',
    description: 'Same as reconnect_server: force a reconnect of one MCP server (connected: close and reconnect; reconnecting: try now; failed / requires_reauth: reset the counters and try). Returns the status after the attempt.',
    inputSchema: serverName,
    annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: false },
  },
  {
    name: 'retry_all_servers',
    description: 'Retry every MCP server that is not connected (reconnecting, failed, requires_reauth) at once. Returns every server status after the attempts.',
    inputSchema: noArgs,
    annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: false },
  },
];

/** What the management tools act on (the Gateway). */
export interface ManagedServers {
  readonly supervisors: ReadonlyMap<string, unknown>;
  summaries(): ServerSummary[];
  detail(name: string): ServerDetail | undefined;
  retry(name: string): Promise<ServerDetail | undefined>;
  retryAll(): Promise<ServerSummary[]>;
}

/** Runs a management tool; undefined when `name` is not one (it is a server's tool then). */
export async function callManagementTool(servers: ManagedServers, name: string, args: Record<string, unknown> | undefined): Promise<CallToolResult | undefined> {
  const serverArg = () => {
    const server = args?.name;
    if (typeof server !== 'string') throw rpcError(ErrorCode.InvalidParams, `${name}: argument 'name' (the server name) is required`);
    if (!servers.supervisors.has(server)) throw rpcError(ErrorCode.InvalidParams, `${name}: no server named '${server}'; servers: ${[...servers.supervisors.keys()].join(', ') || 'none'}`);
    return server;
  };
  switch (name) {
    case 'list_servers':
      return jsonResult({ servers: servers.summaries() });
    case 'get_server_status':
      return jsonResult(servers.detail(serverArg())!);
    case 'reconnect_server':
    case 'retry_server':
      return jsonResult((await servers.retry(serverArg()))!);
    case 'retry_all_servers':
      return jsonResult({ servers: await servers.retryAll() });
    default:
      return undefined;
  }
}

function jsonResult(value: object): CallToolResult {
  return { content: [{ type: 'text', text: JSON.stringify(value, null, 2) }], structuredContent: value as Record<string, unknown> };
}
