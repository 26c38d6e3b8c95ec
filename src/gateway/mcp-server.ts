import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import type { Gateway } from './gateway.js';

export const GATEWAY_INFO = { name: 'tether-gateway', version: '0.1.0' };

/**
 * One MCP server session facing a gateway client (the stdio host, or one Streamable HTTP
 * session): tools/list is the aggregate, tools/call is routed, and a change of the aggregate
 * is announced with notifications/tools/list_changed. Detaches itself when closed.
 */
export function createGatewayServer(gateway: Gateway): Server {
  const server = new Server(GATEWAY_INFO, {
    capabilities: { tools: { listChanged: true } },
    instructions:
      'Tools are named <server>__<tool> after the MCP server that provides them. When a server is down, a call says why and when it retries; list_servers, get_server_status, reconnect_server and retry_all_servers manage the servers.',
  });
  server.setRequestHandler(ListToolsRequestSchema, async () => {
    // A host lists tools right after connecting: give the servers their first attempt.
    await gateway.whenReady();
    return { tools: gateway.tools() };
  });
  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    // Relay the backend's progress under the caller's token: the host sees a long tool is
    // alive, and the backend call's timeout restarts with each report.
    const progressToken = request.params._meta?.progressToken;
    const onprogress =
      progressToken === undefined
        ? undefined
        : (p: { progress: number; total?: number; message?: string }) =>
            void extra.sendNotification({ method: 'notifications/progress', params: { progressToken, ...p } }).catch(() => {});
    return gateway.callTool(request.params.name, request.params.arguments, extra.signal, onprogress);
  });
  const onToolsChanged = () => {
    // Before initialization completes the client would not expect it; it lists tools then anyway.
    if (server.transport && server.getClientCapabilities()) void server.sendToolListChanged().catch(() => {});
  };
  gateway.on('tools_changed', onToolsChanged);
  const previousOnClose = server.onclose;
  server.onclose = () => {
    gateway.off('tools_changed', onToolsChanged);
    previousOnClose?.();
  };
  return server;
}
