/**
 * The client of a connection to a server of the 2026-07-28 era (no `initialize`, no
 * sessions, no `ping`): the SDK v2 `Client` pinned to that revision, wired like the v1
 * client of a 2025 connection (connection.ts) so the rest of the supervisor drives both
 * through the methods they share (connect, close, the list, read, get, call and complete
 * requests, `request`, server capabilities and version). The servers' own requests, which
 * this era embeds in a result (`input_required`), are fulfilled by the SDK through the same
 * handlers, so they reach the gateway's hosts exactly as a 2025 server's requests do.
 */
import { Client as ModernClient, type ClientContext } from '@modelcontextprotocol/client';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { Implementation } from '@modelcontextprotocol/sdk/types.js';
import { CLIENT_CAPABILITIES } from './host-bridge.js';
import type { SupervisorHooks } from '../types.js';

export const MODERN_PROTOCOL_VERSION = '2026-07-28';

/** What a modern connection reports to its watcher. */
export interface ModernWatcher {
  onListChanged(list: 'tools' | 'resources' | 'prompts'): void;
}

/**
 * A v2 Client pinned to 2026-07-28, typed as the v1 Client the supervisor uses: only the
 * methods both have are called on it (checked by test/supervisor/eras.test.ts).
 */
export function createModernClient(clientInfo: Implementation, name: string, hooks: SupervisorHooks, watcher: ModernWatcher): Client {
  const client = new ModernClient(clientInfo, {
    capabilities: CLIENT_CAPABILITIES,
    versionNegotiation: { mode: { pin: MODERN_PROTOCOL_VERSION } },
    listChanged: {
      tools: { autoRefresh: false, onChanged: () => watcher.onListChanged('tools') },
      resources: { autoRefresh: false, onChanged: () => watcher.onListChanged('resources') },
      prompts: { autoRefresh: false, onChanged: () => watcher.onListChanged('prompts') },
    },
  } as ConstructorParameters<typeof ModernClient>[1]);
  const extra = (ctx: ClientContext) => ({ signal: ctx.mcpReq.signal }) as never;
  const noHost = (what: string) => Promise.reject(Object.assign(new Error(`no host to answer ${what}: this server is not behind a gateway`), { code: -32601 }));
  client.setRequestHandler('sampling/createMessage', (req, ctx) => (hooks.onRequest ? hooks.onRequest(name, req as never, extra(ctx)) : noHost('sampling')) as never);
  client.setRequestHandler('elicitation/create', (req, ctx) => (hooks.onRequest ? hooks.onRequest(name, req as never, extra(ctx)) : noHost('elicitation')) as never);
  client.setRequestHandler('roots/list', (req, ctx) => (hooks.onRequest ? hooks.onRequest(name, req as never, extra(ctx)) : Promise.resolve({ roots: [] })) as never);
  keepProgressBeforeResponses(client);
  client.setNotificationHandler('notifications/message', (n) => hooks.onNotification?.(name, n as never));
  client.setNotificationHandler('notifications/resources/updated', (n) => hooks.onNotification?.(name, n as never));
  return client as unknown as Client;
}

/**
 * The SDK v2 client hands a notification to its handler one microtask after it arrived, but
 * settles a response at once, dropping that request's progress handler: progress reports
 * that arrive just before the result (in the same read) are lost. Responses are passed on
 * one microtask later, behind the notifications received before them, so each report
 * reaches its request's onprogress first. (No timer: only the order of what arrived.)
 */
function keepProgressBeforeResponses(client: ModernClient): void {
  const connect = client.connect.bind(client);
  client.connect = (async (transport: Parameters<typeof connect>[0], options?: Parameters<typeof connect>[1]) => {
    await connect(transport, options);
    const deliver = transport.onmessage;
    if (!deliver) return;
    transport.onmessage = (message, extra) => {
      const isResponse = 'id' in message && !('method' in message);
      if (isResponse) queueMicrotask(() => deliver.call(transport, message, extra));
      else deliver.call(transport, message, extra);
    };
  }) as typeof client.connect;
}
