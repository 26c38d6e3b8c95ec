/**
 * A client that sends after the server's close frame arrived, before the socket ends (ws is
 * CLOSING): the loss it reports is the close's own code and reason (a stopping server's 1001
 * 'stopped'), not the failed send, or it would take a stopped server for a drop and reconnect
 * in vain (seen once in CI: the MCP bridge's ack went out in that window).
 *
 * The server is a few lines of raw WebSocket over TCP, so the test decides when the socket
 * ends: after the client has answered the close frame, and after its send has failed.
 */
import { createHash } from 'node:crypto';
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { ExecClient, ServerStoppedError, SessionLostError } from '../../src/client/index.js';
import { SERVER_STOPPED_REASON } from '../../src/protocol/close-reasons.js';

const servers: net.Server[] = [];
afterEach(() => {
  for (const s of servers.splice(0)) s.close();
});

function frame(opcode: number, payload: Buffer): Buffer {
  if (payload.length >= 126) throw new Error('small frames only');
  return Buffer.concat([Buffer.from([0x80 | opcode, payload.length]), payload]);
}

/** Client frames (masked, small or 16-bit length) as they arrive. */
function* readFrames(buffer: { data: Buffer }): Generator<{ opcode: number; payload: Buffer }> {
  for (;;) {
    const b = buffer.data;
    if (b.length < 2) return;
    let len = b[1]! & 0x7f;
    let offset = 2;
    if (len === 126) {
      if (b.length < 4) return;
      len = b.readUInt16BE(2);
      offset = 4;
    }
    if (b.length < offset + 4 + len) return;
    const mask = b.subarray(offset, offset + 4);
    const payload = Buffer.from(b.subarray(offset + 4, offset + 4 + len));
    for (let i = 0; i < payload.length; i++) payload[i]! ^= mask[i % 4]!;
    buffer.data = b.subarray(offset + 4 + len);
    yield { opcode: b[0]! & 0x0f, payload };
  }
}

interface RawPeer {
  url: string;
  /** Resolves with the server side of the connection once the client has initialized. */
  ready: Promise<net.Socket>;
  /** Resolves once the client answered the server's close frame (it is CLOSING now). */
  closeAnswered: Promise<void>;
}

async function rawServer(): Promise<RawPeer> {
  let ready!: (s: net.Socket) => void;
  let closeAnswered!: () => void;
  const peer = {
    ready: new Promise<net.Socket>((r) => (ready = r)),
    closeAnswered: new Promise<void>((r) => (closeAnswered = r)),
  };
  const server = net.createServer((socket) => {
    const buffer = { data: Buffer.alloc(0) };
    let upgraded = false;
    socket.on('error', () => {});
    socket.on('data', (chunk) => {
      buffer.data = Buffer.concat([buffer.data, chunk]);
      if (!upgraded) {
        const end = buffer.data.indexOf('\r\n\r\n');
        if (end < 0) return;
        const key = /sec-websocket-key: *(\S+)/i.exec(buffer.data.subarray(0, end).toString())![1];
        const accept = createHash('sha1').update(`${key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest('base64');
        socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`);
        buffer.data = buffer.data.subarray(end + 4);
        upgraded = true;
      }
      for (const { opcode, payload } of readFrames(buffer)) {
        if (opcode === 0x8) closeAnswered();
        if (opcode !== 0x1) continue;
        const message = JSON.parse(payload.toString());
        if (message.method === 'initialize') socket.write(frame(0x1, Buffer.from(JSON.stringify({ id: message.id, result: { sessionId: 's-1', environmentInfo: {} } }))));
        else if (message.method === 'initialized') ready(socket);
      }
    });
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `ws://127.0.0.1:${(server.address() as net.AddressInfo).port}`, ...peer };
}

describe('a send between the server close frame and the end of its socket', () => {
  it("reports the close's reason (server stopped), not the failed send", async () => {
    const peer = await rawServer();
    const client = await ExecClient.connect(peer.url, { extensions: [], recoveryDeadlineMs: 60_000 });
    const failed = new Promise<{ error?: Error }>((resolve) => client.on('state', (s) => s.state === 'failed' && resolve(s)));
    const states: string[] = [];
    client.on('state', (s) => states.push(s.state));
    const socket = await peer.ready;
    const reason = Buffer.from(SERVER_STOPPED_REASON);
    const body = Buffer.alloc(2 + reason.length);
    body.writeUInt16BE(1001, 0);
    reason.copy(body, 2);
    socket.write(frame(0x8, body));
    await peer.closeAnswered; // the client is CLOSING: its socket is still open
    const request = client.request('environment/status').catch((err: unknown) => err);
    await new Promise((resolve) => setImmediate(resolve)); // ws fails that send on the next tick
    socket.destroy(); // only now does the client's 'close' (code 1001, the reason) come
    const change = await failed;
    expect(change.error).toBeInstanceOf(ServerStoppedError);
    expect((change.error as SessionLostError).reason).toBe('stopped');
    expect(states).not.toContain('recovering');
    expect(await request).toBeInstanceOf(Error);
    await client.close();
  });
});
