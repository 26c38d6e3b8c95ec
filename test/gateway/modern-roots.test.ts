/**
 * The roots forwarding rule for 2026-07-28 hosts (issue #26). A server's roots/list gets the
 * union of the roots the 2025 hosts announce; when the calls in flight to that server all
 * come from one 2026-07-28 host that declares `roots`, that host is asked too (its call's
 * `input_required`), and its roots join the union. A 2026 host that does not declare roots is
 * not asked. Backends of both eras: a 2025 one (the dual SDK v2 fixture, spoken to in 2025)
 * asks with a request, a 2026-07-28 one with its own `input_required`.
 */
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client as ClientV2, StreamableHTTPClientTransport as StreamableHttpV2 } from '@modelcontextprotocol/client';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ListRootsRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { Gateway, parseConfig, startGatewayHttp, type GatewayHttp } from '../../src/gateway/index.js';
import { node, repoRoot, text } from '../helpers/mcp-peers.js';

const v2 = (mode: string) => ({ command: node, args: [path.join(repoRoot, 'test/fixtures/mcp-v2-server.mjs'), mode] });
let gateway: Gateway;
let http: GatewayHttp;
let legacyHost: Client;

beforeAll(async () => {
  gateway = new Gateway(parseConfig({ supervisor: { healthIntervalMs: 0 }, mcpServers: { modern: v2('modern'), dual: v2('dual') } }));
  http = await startGatewayHttp(gateway, { port: 0 });
  await gateway.start();
  // A 2025 host that announces a root.
  legacyHost = new Client({ name: 'v1-roots', version: '1.0.0' }, { capabilities: { roots: { listChanged: true } } });
  legacyHost.setRequestHandler(ListRootsRequestSchema, async () => ({ roots: [{ uri: 'file:///from-2025-host', name: 'old' }] }));
  await legacyHost.connect(new StreamableHTTPClientTransport(new URL(`${http.url}/mcp`)));
}, 60_000);

afterAll(async () => {
  await legacyHost?.close();
  await http?.close();
  await gateway?.close();
});

async function modernHost(roots: boolean): Promise<{ client: ClientV2; asked: () => number }> {
  const client = new ClientV2({ name: 'v2-roots', version: '1.0.0' }, { versionNegotiation: { mode: { pin: '2026-07-28' } }, capabilities: roots ? { roots: {} } : {} });
  let asked = 0;
  if (roots) {
    client.setRequestHandler('roots/list', async () => {
      asked++;
      return { roots: [{ uri: 'file:///from-2026-host', name: 'new' }] };
    });
  }
  await client.connect(new StreamableHttpV2(new URL(`${http.url}/mcp`)));
  return { client, asked: () => asked };
}

describe("a server's roots/list during a 2026-07-28 host's call", () => {
  it('the 2025 host announced its root', async () => {
    await expect.poll(() => gateway.roots().map((r) => r.uri), { timeout: 10_000 }).toEqual(['file:///from-2025-host']);
  });

  it.each(['dual', 'modern'])('%s backend: the 2026 host that declares roots is asked (input_required); its roots join the 2025 hosts\'', async (backend) => {
    const { client, asked } = await modernHost(true);
    try {
      expect(text(await client.callTool({ name: `${backend}__roots`, arguments: {} }))).toBe('roots: file:///from-2025-host file:///from-2026-host');
      expect(asked()).toBe(1);
    } finally {
      await client.close();
    }
  });

  it('a 2026 host that does not declare roots is not asked: the server gets the 2025 hosts\' roots', async () => {
    const { client } = await modernHost(false);
    try {
      expect(text(await client.callTool({ name: 'dual__roots', arguments: {} }))).toBe('roots: file:///from-2025-host');
      expect(text(await client.callTool({ name: 'modern__roots', arguments: {} }))).toBe('roots: file:///from-2025-host');
    } finally {
      await client.close();
    }
  });
});
