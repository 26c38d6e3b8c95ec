import type { Tool } from '@modelcontextprotocol/sdk/types.js';

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
