/**
 * A peer that keeps its side of the socket open after the server answered it (a rejected
 * upgrade) holds neither a descriptor for long nor the server's stop: before, `tether serve`
 * never exited on SIGTERM while such a peer was around, and such peers filled the
 * connection cap.
 */
import { connect, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { startServer, type TetherServer } from '../../src/server/index.js';

const UPGRADE =
  'GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n' +
  'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n';

let server: TetherServer | undefined;
const peers: Socket[] = [];
afterEach(async () => {
  for (const peer of peers.splice(0)) peer.destroy();
  await server?.close();
  server = undefined;
});

/** An upgrade without the token, from a peer that never closes its side; resolves once answered. */
async function stubbornPeer(url: string): Promise<void> {
  const peer = connect(Number(new URL(url).port), '127.0.0.1');
  peer.allowHalfOpen = true; // the server's FIN does not close our side
  peer.on('error', () => {});
  peers.push(peer);
  const answer = new Promise<string>((resolve) => peer.once('data', (d: Buffer) => resolve(d.toString())));
  peer.write(UPGRADE);
  expect((await answer).split('\r\n')[0]).toBe('HTTP/1.1 401 Unauthorized');
}

describe('peers that keep a rejected socket open', () => {
  it('lose their socket on the server soon after their answer', async () => {
    server = await startServer({ port: 0, token: 'secret' });
    await stubbornPeer(server.url);
    await stubbornPeer(server.url);
    expect(server.socketCount).toBe(2);
    await expect.poll(() => server!.socketCount, { timeout: 10_000, interval: 100 }).toBe(0);
  });

  it("do not hold the server's stop", async () => {
    server = await startServer({ port: 0, token: 'secret' });
    await stubbornPeer(server.url);
    const stopped = await Promise.race([
      server.close().then(() => true),
      new Promise<false>((resolve) => setTimeout(() => resolve(false), 1_500).unref()),
    ]);
    expect(stopped, 'server.close() waited for the peer').toBe(true);
  });
});
