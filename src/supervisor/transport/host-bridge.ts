/**
 * A supervised server's own requests (sampling, elicitation, roots) and notifications (log
 * messages, resource updates) routed to the gateway's hosts through SupervisorHooks; and
 * what the gateway declares to every server as an MCP client.
 */
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
  LoggingMessageNotificationSchema,
  ResourceUpdatedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';
import type { SupervisorHooks } from '../types.js';

/**
 * What the gateway offers every server as an MCP client: it forwards sampling and
 * elicitation to its hosts and answers roots with theirs (src/gateway decides which host).
 * Declared always, so servers that register tools by client capability show them all.
 */
export const CLIENT_CAPABILITIES = { sampling: {}, elicitation: { form: {}, url: {} }, roots: { listChanged: true } };

/** Routes the server `name`'s requests and notifications on `client` to `hooks`. */
export function bridgeToHosts(client: Client, name: string, hooks: SupervisorHooks): void {
  const noHost = (what: string) => () => Promise.reject(Object.assign(new Error(`no host to answer ${what}: this server is not behind a gateway`), { code: -32601 }));
  client.setRequestHandler(CreateMessageRequestSchema, (req, extra) => (hooks.onRequest ?? noHost('sampling'))(name, req, extra) as never);
  client.setRequestHandler(ElicitRequestSchema, (req, extra) => (hooks.onRequest ?? noHost('elicitation'))(name, req, extra) as never);
  client.setRequestHandler(ListRootsRequestSchema, (req, extra) => (hooks.onRequest ? hooks.onRequest(name, req, extra) : Promise.resolve({ roots: [] })) as never);
  client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => hooks.onNotification?.(name, n));
  client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => hooks.onNotification?.(name, n));
}
