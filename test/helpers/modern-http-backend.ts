/**
 * A 2026-07-28-only MCP server over HTTP (SDK v2 `createMcpHandler`, legacy rejected) on
 * loopback: one `echo` tool. For the gateway's http backends of the modern era.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import { McpServer, createMcpHandler } from '@modelcontextprotocol/server';
import { z } from 'zod';

export async function modernHttpBackend(): Promise<{ url: string; close(): Promise<void> }> {
  const handler = createMcpHandler(
    () => {
      const server = new McpServer({ name: 'v2-http-modern', version: '1.0.0' }, { capabilities: { tools: {} } });
      server.registerTool('echo', { inputSchema: z.object({ message: z.string() }) }, async ({ message }) => ({ content: [{ type: 'text', text: `Echo (http modern): ${message}` }] }));
      return server;
    },
    { legacy: 'reject' },
  );
  const http = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const headers = new Headers();
      for (const [k, v] of Object.entries(req.headers)) if (typeof v === 'string') headers.set(k, v);
      const body = req.method === 'GET' || req.method === 'HEAD' ? undefined : Buffer.concat(chunks);
      void handler.fetch(new Request(`http://${req.headers.host}${req.url}`, { method: req.method, headers, body })).then((response) => {
        res.writeHead(response.status, Object.fromEntries(response.headers));
        if (response.body) Readable.fromWeb(response.body as never).pipe(res);
        else res.end();
      });
    });
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const { port } = http.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    close: async () => {
      await handler.close();
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}
