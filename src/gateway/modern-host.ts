/**
 * The gateway as a server of the 2026-07-28 era (SDK v2 `Server`): no `initialize`, no
 * session, a `_meta` envelope on every request. Each host request is one serving unit, so
 * there is no host session: tools, prompts, resources and completions go to the servers as
 * for a 2025 host, with progress and cancellation relayed, and list changes announced to the
 * host's `subscriptions/listen` stream by the SDK. A server's sampling or elicitation during
 * such a host's call becomes that call's `input_required` (input-bridge.ts), and so does its
 * roots/list when the host declares `roots` (relay.ts). The log level is not set (this era
 * carries it per request).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import { Server } from '@modelcontextprotocol/server';

/** Where a 2026-07-28 request's `_meta` envelope carries the client's capabilities. */
const CLIENT_CAPABILITIES_META_KEY = 'io.modelcontextprotocol/clientCapabilities';
import type { Gateway, HostContext, HostList } from './gateway.js';
import { sendListsChanged } from './list-changes.js';
import { InputBridge, type BridgedCall } from './input-bridge.js';
import { GATEWAY_INFO } from './mcp-server.js';

/** How long a call waiting on a 2026 host's answer (`input_required`) is kept for its next round. */
const RESUME_TIMEOUT_MS = 60_000;
const bridges = new WeakMap<Gateway, InputBridge>();
function bridgeOf(gateway: Gateway): InputBridge {
  let bridge = bridges.get(gateway);
  if (!bridge) bridges.set(gateway, (bridge = new InputBridge(RESUME_TIMEOUT_MS)));
  return bridge;
}

/**
 * One 2026-07-28 serving instance of the gateway (serveStdio makes one per connection,
 * createMcpHandler one per request). `announce`: it sends list changes itself (stdio; over
 * HTTP the handler's bus does, createModernHttp).
 */
export function createModernGatewayServer(gateway: Gateway, announce = true): Server {
  const server = new Server(GATEWAY_INFO, {
    capabilities: { tools: { listChanged: true }, resources: { listChanged: true }, prompts: { listChanged: true }, completions: {} },
    instructions:
      'Tools and prompts are named <server>__<name> after the MCP server that provides them; resource URIs are the servers\' own. When a server is down, a call says why and when it retries; list_servers, get_server_status, reconnect_server (alias retry_server) and retry_all_servers manage the servers.',
  });
  type Ctx = {
    mcpReq: {
      signal: AbortSignal;
      notify(n: { method: string; params?: Record<string, unknown> }): Promise<void>;
      inputResponses?: Record<string, unknown>;
      requestState?: () => unknown;
      envelope?: Record<string, unknown>;
    };
  };
  const ctx = (params: { _meta?: { progressToken?: string | number } } | undefined, c: Ctx, call?: BridgedCall): HostContext => ({
    // What the relay uses of a host request's context: its signal, and a way to send progress.
    extra: { signal: call?.signal ?? c.mcpReq.signal, sendNotification: (n: { method: string; params?: Record<string, unknown> }) => c.mcpReq.notify(n) } as unknown as HostContext['extra'],
    progressToken: params?._meta?.progressToken,
    ask: call ? (request) => call.ask(request as never) : undefined,
    roots: (c.mcpReq.envelope?.[CLIENT_CAPABILITIES_META_KEY] as { roots?: unknown } | undefined)?.roots !== undefined,
  });
  /** A call that may need the host's input on the way: one round of it (input-bridge.ts). */
  const bridged = (c: Ctx, run: (call: BridgedCall) => Promise<unknown>) => {
    const state = c.mcpReq.requestState?.();
    return bridgeOf(gateway).round(run as never, c.mcpReq.signal, c.mcpReq.inputResponses, typeof state === 'string' ? state : undefined) as never;
  };
  server.setRequestHandler('tools/list', async () => {
    await gateway.whenReady();
    return { tools: gateway.tools() } as never;
  });
  server.setRequestHandler('prompts/list', async () => {
    await gateway.whenReady();
    return { prompts: gateway.prompts() } as never;
  });
  server.setRequestHandler('resources/list', async () => {
    await gateway.whenReady();
    return { resources: gateway.resources() } as never;
  });
  server.setRequestHandler('resources/templates/list', async () => {
    await gateway.whenReady();
    return { resourceTemplates: gateway.resourceTemplates() } as never;
  });
  server.setRequestHandler('tools/call', (req, c) => bridged(c as unknown as Ctx, (call) => gateway.callTool(req.params.name, req.params.arguments, ctx(req.params, c as unknown as Ctx, call))));
  server.setRequestHandler('prompts/get', (req, c) => bridged(c as unknown as Ctx, (call) => gateway.getPrompt(req.params.name, req.params.arguments, ctx(req.params, c as unknown as Ctx, call))));
  server.setRequestHandler('resources/read', (req, c) => bridged(c as unknown as Ctx, (call) => gateway.readResource(req.params.uri, ctx(req.params, c as unknown as Ctx, call))));
  server.setRequestHandler('completion/complete', (req, c) => gateway.complete(req.params as never, ctx(req.params, c as unknown as Ctx)) as never);

  if (!announce) return server;
  const onListsChanged = (lists: HostList[]) => sendListsChanged(server, lists);
  gateway.on('lists_changed', onListsChanged);
  const previousOnClose = server.onclose;
  server.onclose = () => {
    gateway.off('lists_changed', onListsChanged);
    previousOnClose?.();
  };
  return server;
}

/** 2026-07-28 on the gateway's `/mcp` beside 2025's sessions: one SDK v2 handler for the modern requests. */
export interface ModernHttp {
  /** Serves `req` (its body already read: `raw`) if it is a 2026-07-28 request; false when it is a 2025 one. */
  serve(req: IncomingMessage, res: ServerResponse, raw: string, body: unknown): Promise<boolean>;
  close(): Promise<void>;
}

/**
 * 2026-07-28 requests have no session: http.ts weighs each one before it is parsed and holds
 * it in its client address's share (request-limits.ts), as a 2025 request in its session's.
 */
export async function createModernHttp(gateway: Gateway): Promise<ModernHttp> {
  const { createMcpHandler, isLegacyRequest } = await import('@modelcontextprotocol/server');
  const handler = createMcpHandler(() => createModernGatewayServer(gateway, false), { legacy: 'reject' });
  const onListsChanged = (lists: HostList[]) => {
    for (const list of lists) {
      if (list === 'tools') handler.notify.toolsChanged();
      else if (list === 'prompts') handler.notify.promptsChanged();
      else handler.notify.resourcesChanged();
    }
  };
  gateway.on('lists_changed', onListsChanged);
  return {
    async serve(req, res, raw, body) {
      const aborter = new AbortController();
      const headers = new Headers();
      for (const [name, value] of Object.entries(req.headers)) if (typeof value === 'string') headers.set(name, value);
      const request = new Request(new URL(req.url ?? '/mcp', `http://${req.headers.host ?? 'localhost'}`), { method: 'POST', headers, body: raw, signal: aborter.signal });
      if (await isLegacyRequest(request.clone(), body)) return false;
      res.once('close', () => aborter.abort());
      const response = await handler.fetch(request, { parsedBody: body });
      res.writeHead(response.status, Object.fromEntries(response.headers));
      if (!response.body) res.end();
      else Readable.fromWeb(response.body as never).on('error', () => res.destroy()).pipe(res);
      return true;
    },
    async close() {
      gateway.off('lists_changed', onListsChanged);
      await handler.close();
    },
  };
}
