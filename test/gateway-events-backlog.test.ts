/**
 * An /events subscriber that stops reading cannot make the gateway hold every event since:
 * once more than 1 MiB waits for it, its stream is closed (it reconnects to a fresh snapshot).
 */
import { connect } from 'node:net';
import { once } from 'node:events';
import { describe, expect, it } from 'vitest';
import { Gateway, parseConfig, startGatewayHttp } from '../src/gateway/index.js';
import type { ServerSummary } from '../src/supervisor/index.js';

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
