/**
 * An /events subscriber that stops reading cannot make the gateway hold every event since:
 * once more than 1 MiB waits for it, its stream is closed (it reconnects to a fresh snapshot).
 */
import { connect } from 'node:net';
import { once } from 'node:events';
import { describe, expect, it } from 'vitest';
import { Gateway, parseConfig, startGatewayHttp } from '../../../src/gateway/index.js';
import type { ServerSummary } from '../../../src/supervisor/index.js';

describe('/events and a subscriber that does not read', () => {
  it('is closed once its backlog passes the bound, instead of growing with every event', async () => {
    const gateway = new Gateway(parseConfig({ mcpServers: {} }));
    const http = await startGatewayHttp(gateway, { port: 0 });
    const socket = connect(http.port, '127.0.0.1');
    try {
      await once(socket, 'connect');
      socket.write(`GET /events HTTP/1.1\r\nHost: 127.0.0.1:${http.port}\r\n\r\n`);
      let received = 0;
      let ended = false;
      socket.on('data', (d: Buffer) => (received += d.length));
      // The snapshot arrives: the stream is open. Then the subscriber stops reading.
      await new Promise<void>((resolve) => socket.once('data', () => resolve()));
      socket.pause();
      const summary = { name: 'x', padding: 'A'.repeat(10_000) } as unknown as ServerSummary;
      const events = 2000; // about 20 MB of events
      for (let i = 0; i < events; i++) gateway.emit('status', summary);
      // Read again: either the stream ends (cut), or every event arrives (held for it).
      const finished = new Promise<void>((resolve) => {
        socket.on('end', () => ((ended = true), resolve()));
        socket.on('close', () => resolve());
        socket.on('data', () => received >= events * 10_000 && resolve());
      });
      socket.resume();
      await finished;
      expect(ended).toBe(true);
      expect(received).toBeLessThan((events * 10_000) / 2);
    } finally {
      socket.destroy();
      await http.close();
      await gateway.close();
    }
  }, 60_000);
});

describe("a 2025 session's stream that its host does not read", () => {
  it('is closed once its backlog passes the bound; the session itself goes on', async () => {
    const gateway = new Gateway(parseConfig({ mcpServers: {} }));
    const http = await startGatewayHttp(gateway, { port: 0 });
    const post = (headers: Record<string, string>, body: unknown) =>
      fetch(`${http.url}/mcp`, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers }, body: JSON.stringify(body) });
    const init = await post({}, { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'slow', version: '1' } } });
    const session = init.headers.get('mcp-session-id')!;
    await init.text();
    const headers = { 'mcp-session-id': session, 'mcp-protocol-version': '2025-06-18' };
    await (await post(headers, { jsonrpc: '2.0', method: 'notifications/initialized' })).text();
    const socket = connect(http.port, '127.0.0.1');
    try {
      await once(socket, 'connect');
      socket.write(`GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:${http.port}\r\nAccept: text/event-stream\r\nMcp-Session-Id: ${session}\r\nMcp-Protocol-Version: 2025-06-18\r\n\r\n`);
      let received = 0;
      let ended = false;
      socket.on('data', (d: Buffer) => (received += d.length));
      // The stream's headers arrive: it is open. Then the host stops reading it.
      await new Promise<void>((resolve) => socket.once('data', () => resolve()));
      socket.pause();
      const events = 20_000; // three list changes each: some 5 MB of notifications
      for (let i = 0; i < events; i++) gateway.emit('lists_changed', ['tools', 'resources', 'prompts']);
      const total = events * 3 * 80;
      // Read again: either the stream ends (cut), or every notification arrives (held for it).
      const finished = new Promise<void>((resolve) => {
        socket.on('end', () => ((ended = true), resolve()));
        socket.on('close', () => resolve());
        socket.on('data', () => received >= total && resolve());
      });
      socket.resume();
      await finished;
      expect(ended).toBe(true);
      expect(received).toBeLessThan(total / 2);
      // The session is still there: a request in it is answered.
      const list = await post(headers, { jsonrpc: '2.0', id: 1, method: 'tools/list' });
      expect(list.status).toBe(200);
      expect(await list.text()).toContain('list_servers');
    } finally {
      socket.destroy();
      await http.close();
      await gateway.close();
    }
  }, 60_000);
});
