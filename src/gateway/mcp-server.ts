import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import {
  CallToolRequestSchema,
  CompleteRequestSchema,
  GetPromptRequestSchema,
  ListPromptsRequestSchema,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListToolsRequestSchema,
  ReadResourceRequestSchema,
  RootsListChangedNotificationSchema,
  SetLevelRequestSchema,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';
import type { Gateway, HostContext, HostList } from './gateway.js';
import { sendListsChanged } from './list-changes.js';

export const GATEWAY_INFO = { name: 'tether-gateway', version: '0.1.0' };

/**
 * One MCP server session facing a gateway client (the stdio host, or one Streamable HTTP
 * session): the whole MCP surface of the servers behind it. Tools and prompts are
 * `<server>__<name>`, resources keep their URIs (see resources.ts), every request is routed
 * to its server with progress and cancellation, and changes are announced with
 * list_changed. `initialize` is answered at once, before slow servers connect, so every
 * capability is advertised from the start; lists are empty until servers have them (a list
 * request waits for the servers' first attempts, bounded). Detaches itself when closed.
 */
export interface GatewayServerOptions {
  /**
   * Streamable HTTP: a server-to-client request is lost until the host opens its stream
   * (GET /mcp), so roots are asked then (http.ts calls hostStreamOpened), or after 1 s.
   */
  rootsAfterStream?: boolean;
}

const rootsFetchers = new WeakMap<Server, () => void>();
const streamOpened = new WeakSet<Server>();

/** The host of this session opened its event stream: a good moment to ask for its roots. */
export function hostStreamOpened(server: Server): void {
  if (streamOpened.has(server)) return;
  streamOpened.add(server);
  rootsFetchers.get(server)?.();
}

export function createGatewayServer(gateway: Gateway, opts: GatewayServerOptions = {}): Server {
  const server = new Server(GATEWAY_INFO, {
    capabilities: {
      tools: { listChanged: true },
      resources: { subscribe: true, listChanged: true },
      prompts: { listChanged: true },
      completions: {},
      logging: {},
    },
    instructions:
      'Tools and prompts are named <server>__<name> after the MCP server that provides them; resource URIs are the servers\' own. When a server is down, a call says why and when it retries; list_servers, get_server_status, reconnect_server (alias retry_server) and retry_all_servers manage the servers.',
  });
  const host = gateway.attachHost(server);
  const ctx = (request: { params?: { _meta?: { progressToken?: string | number } } }, extra: HostContext['extra']): HostContext => ({
    host,
    extra,
    progressToken: request.params?._meta?.progressToken,
  });

  // A host lists right after connecting: give the servers their first attempt (bounded).
  server.setRequestHandler(ListToolsRequestSchema, async () => {
    await gateway.whenReady();
    return { tools: gateway.tools() };
  });
  server.setRequestHandler(ListPromptsRequestSchema, async () => {
    await gateway.whenReady();
    return { prompts: gateway.prompts() };
  });
  server.setRequestHandler(ListResourcesRequestSchema, async () => {
    await gateway.whenReady();
    return { resources: gateway.resources() };
  });
  server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => {
    await gateway.whenReady();
    return { resourceTemplates: gateway.resourceTemplates() };
  });
  server.setRequestHandler(CallToolRequestSchema, (request, extra) => gateway.callTool(request.params.name, request.params.arguments, ctx(request, extra)));
  server.setRequestHandler(GetPromptRequestSchema, (request, extra) => gateway.getPrompt(request.params.name, request.params.arguments, ctx(request, extra)) as never);
  server.setRequestHandler(ReadResourceRequestSchema, (request, extra) => gateway.readResource(request.params.uri, ctx(request, extra)) as never);
  server.setRequestHandler(SubscribeRequestSchema, async (request) => {
    await gateway.subscribe(host, request.params.uri);
    return {};
  });
  server.setRequestHandler(UnsubscribeRequestSchema, async (request) => {
    await gateway.unsubscribe(host, request.params.uri);
    return {};
  });
  server.setRequestHandler(CompleteRequestSchema, (request, extra) => gateway.complete(request.params, ctx(request, extra)) as never);
  server.setRequestHandler(SetLevelRequestSchema, async (request) => {
    gateway.setLogLevel(host, request.params.level);
    return {};
  });

  // Roots: asked of the host once it is initialized (over Streamable HTTP: once it opened
  // the stream a request can reach it on) and whenever it says they changed.
  const fetchRoots = async () => {
    if (!server.getClientCapabilities()?.roots) return;
    // A request sent before an HTTP host's stream is open is lost: ask again, bounded.
    for (let attempt = 1; attempt <= 3; attempt++) {
      try {
        const { roots } = await server.listRoots(undefined, { timeout: 2000 * attempt });
        gateway.setRoots(host, roots);
        return;
      } catch {
        // A host that announces roots but cannot list them has none to offer.
      }
    }
  };
  rootsFetchers.set(server, () => void fetchRoots());
  server.oninitialized = () => {
    if (opts.rootsAfterStream) setTimeout(() => void (streamOpened.has(server) || fetchRoots()), 1000).unref();
    else void fetchRoots();
  };
  server.setNotificationHandler(RootsListChangedNotificationSchema, () => void fetchRoots());

  const onListsChanged = (lists: HostList[]) => {
    // Before initialization completes the client would not expect it; it lists then anyway.
    if (!server.transport || !server.getClientCapabilities()) return;
    sendListsChanged(server, lists);
  };
  gateway.on('lists_changed', onListsChanged);
  const previousOnClose = server.onclose;
  server.onclose = () => {
    gateway.off('lists_changed', onListsChanged);
    gateway.detachHost(host);
    previousOnClose?.();
  };
  return server;
}
