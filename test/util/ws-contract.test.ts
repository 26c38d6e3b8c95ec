/**
 * The contract with the installed `ws` (issue #24): each thing src/util/ws-internals.ts
 * relies on in `ws`'s private workings, checked against a real `ws` server and client on
 * 127.0.0.1. A `ws` upgrade that changes one of them fails here with "ws X.Y.Z changed ...",
 * naming what tether would have broken, instead of somewhere downstream.
 */
import { createServer, type Server } from 'node:http';
import { connect, Socket, type AddressInfo } from 'node:net';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Duplex } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import WebSocket, { WebSocketServer } from 'ws';
import {
  afterWsReads,
  giveCloseReason,
  netConnectOptions,
  passToWs,
  rawSocketOf,
  WS_CHECKED_VERSION,
  type WsConnectOptions,
} from '../../src/util/ws-internals.js';

const WS_VERSION: string = JSON.parse(readFileSync(new URL('../../node_modules/ws/package.json', import.meta.url), 'utf8')).version;
const changed = (what: string) => `ws ${WS_VERSION} changed ${what} (src/util/ws-internals.ts was checked against ws ${WS_CHECKED_VERSION})`;

/** A failure guard, not synchronisation: rejects with the contract's sentence if `p` never settles. */
function within<T>(p: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(changed(`${what}: nothing happened within 10 s`))), 10_000);
  });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

/** An unmasked (server to client) frame with a payload under 126 bytes. */
function frame(opcode: number, payload: Buffer, fin = true): Buffer {
  expect(payload.length).toBeLessThan(126);
  return Buffer.concat([Buffer.from([(fin ? 0x80 : 0) | opcode, payload.length]), payload]);
}

interface Accepted {
  ws: WebSocket;
  socket: Duplex;
  /** ws's 'data' listeners on the socket when handleUpgrade's callback ran. */
  dataListenersAtCallback: number;
}

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const cleanup of cleanups.splice(0)) cleanup();
});

/** A server as tether runs one (noServer, no permessage-deflate, maxPayload), on 127.0.0.1 or a unix socket. */
async function startServer(
  onAccept: (accepted: Accepted) => void,
  listenOn: { path: string } | { host: string; port: number } = { host: '127.0.0.1', port: 0 },
): Promise<{ http: Server; url: string }> {
  const wss = new WebSocketServer({ noServer: true, perMessageDeflate: false, maxPayload: 1024, clientTracking: false });
  const http = createServer();
  http.on('upgrade', (req, socket, head) => {
    wss.handleUpgrade(req, socket, head, (ws) => {
      ws.on('error', () => {});
      onAccept({ ws, socket, dataListenersAtCallback: socket.listenerCount('data') });
    });
  });
  await new Promise<void>((resolve) => http.listen(listenOn, resolve));
  cleanups.push(() => {
    http.closeAllConnections();
    http.close();
  });
  const url = 'path' in listenOn ? `ws+unix:${listenOn.path}:/` : `ws://127.0.0.1:${(http.address() as AddressInfo).port}/`;
  return { http, url };
}

function client(url: string, options: WebSocket.ClientOptions = {}): WebSocket {
  const ws = new WebSocket(url, { perMessageDeflate: false, ...options });
  ws.on('error', () => {});
  cleanups.push(() => ws.terminate());
  return ws;
}

function nextMessage(ws: WebSocket, count = 1): Promise<{ data: Buffer; isBinary: boolean }[]> {
  return new Promise((resolve) => {
    const got: { data: Buffer; isBinary: boolean }[] = [];
    const onMessage = (data: WebSocket.RawData, isBinary: boolean) => {
      got.push({ data: Buffer.isBuffer(data) ? data : Buffer.concat(data as Buffer[]), isBinary });
      if (got.length === count) {
        ws.off('message', onMessage);
        resolve(got);
      }
    };
    ws.on('message', onMessage);
  });
}

describe(`the ws internals tether relies on (installed ws ${WS_VERSION})`, () => {
  it('is ws 8.x (the major version ws-internals.ts was read from)', () => {
    expect(WS_VERSION.split('.')[0], changed('its major version')).toBe(WS_CHECKED_VERSION.split('.')[0]);
  });

  it("rawSocketOf: a server WebSocket's private socket is the upgrade's net.Socket, frames written to it arrive in order with ws's own, and count in bufferedAmount", async () => {
    let accept!: (a: Accepted) => void;
    const accepted = new Promise<Accepted>((resolve) => (accept = resolve));
    const { url } = await startServer((a) => accept(a));
    const peer = client(url);
    const messages = nextMessage(peer, 3);
    const { ws, socket } = await within(accepted, 'handleUpgrade');
    const raw = rawSocketOf(ws);
    expect(raw, changed('where a WebSocket keeps its socket (_socket)')).toBeInstanceOf(Socket);
    expect(raw === socket, changed('the socket in _socket (not the one handed to handleUpgrade)')).toBe(true);

    // A frame of ours between two of ws's: ws's Sender writes synchronously (no deflate).
    const ours = Buffer.from([0x01, 0x02, 0x00, 0xff, 0x10]);
    ws.send('before');
    raw.cork();
    raw.write(frame(0x2, ours));
    expect(ws.bufferedAmount, changed('bufferedAmount: bytes written to _socket no longer count in it')).toBeGreaterThanOrEqual(ours.length + 2);
    raw.uncork();
    ws.send('after');
    const got = await within(messages, 'a frame written to _socket: the peer never got three messages');
    expect(
      got.map((m) => [m.isBinary, m.data.toString('hex')]),
      changed('the order of frames written to _socket and by ws.send'),
    ).toEqual([
      [false, Buffer.from('before').toString('hex')],
      [true, ours.toString('hex')],
      [false, Buffer.from('after').toString('hex')],
    ]);
  });

  it('giveCloseReason: the close ws makes itself for an oversized message (1009) goes through the instance and carries the reason', async () => {
    const { url } = await startServer(({ ws }) => giveCloseReason(ws, 1009, 'message exceeds the limit'));
    const peer = client(url);
    await within(new Promise((resolve) => peer.once('open', resolve)), 'the handshake');
    const closed = new Promise<[number, string]>((resolve) => peer.once('close', (code, reason) => resolve([code, reason.toString()])));
    peer.send(Buffer.alloc(2048, 0x61));
    expect(await within(closed, 'the 1009 close'), changed('how it closes an oversized message (receiverOnError calling websocket.close(code))')).toEqual([
      1009,
      'message exceeds the limit',
    ]);
  });

  it("afterWsReads: a 'data' listener added in handleUpgrade's callback runs after ws parsed the chunk and emitted its message", async () => {
    const order: string[] = [];
    let dataListeners = -1;
    let seen!: () => void;
    const done = new Promise<void>((resolve) => (seen = resolve));
    const { url } = await startServer(({ ws, socket, dataListenersAtCallback }) => {
      dataListeners = dataListenersAtCallback;
      ws.on('message', () => order.push('message'));
      afterWsReads(socket as Socket, () => {
        order.push('data');
        seen();
      });
    });
    const peer = client(url);
    await within(new Promise((resolve) => peer.once('open', resolve)), 'the handshake');
    peer.send('hello');
    await within(done, 'the message reaching the server');
    expect(dataListeners, changed("handleUpgrade: its callback runs before ws's 'data' listener is on the socket")).toBeGreaterThanOrEqual(1);
    expect(order, changed("when it emits 'message' (no longer inside its socket 'data' listener)")).toEqual(['message', 'data']);
  });

  it('netConnectOptions: createConnection gets host and port for ws://, socketPath for ws+unix:, and connecting with what it makes works', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tether-ws-contract-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const path = join(dir, 'ws.sock');
    const servers = [await startServer(() => {}), await startServer(() => {}, { path })];
    const seen: { host?: string; port?: number | string; socketPath?: string }[] = [];
    for (const { url } of servers) {
      const peer = client(url, {
        createConnection: ((options: WsConnectOptions) => {
          seen.push({ ...options });
          return connect(netConnectOptions(options));
        }) as never,
      });
      await within(
        new Promise((resolve, reject) => {
          peer.once('open', resolve);
          peer.once('error', (err) => reject(new Error(changed(`the options it passes to createConnection: opening ${url} failed: ${err.message}`))));
        }),
        `opening ${url} through createConnection`,
      );
    }
    expect([seen[0]?.host, seen[0]?.port], changed('the options it passes to createConnection for ws://')).toEqual([
      '127.0.0.1',
      String((servers[0]!.http.address() as AddressInfo).port),
    ]);
    expect(seen[1]?.socketPath, changed('the options it passes to createConnection for ws+unix: (socketPath)')).toBe(path);
  });

  it("passToWs: from 'open' on, bytes emitted as 'data' on the client's socket are parsed as frames, however cut, and a violation closes it", async () => {
    const { url } = await startServer(() => {});
    let socket!: Socket;
    const peer = client(url, {
      createConnection: ((options: WsConnectOptions) => (socket = connect(netConnectOptions(options)))) as never,
    });
    const messages = nextMessage(peer, 2);
    await within(
      new Promise<void>((resolve) =>
        peer.once('open', () => {
          // As client/demux-socket.ts starts its demux: in the 'open' listener, before any read.
          const text = frame(0x1, Buffer.from('fed as data'));
          passToWs(socket, text.subarray(0, 3));
          passToWs(socket, text.subarray(3));
          // A message in two fragments, cut mid-header.
          const both = Buffer.concat([frame(0x2, Buffer.from([1, 2]), false), frame(0x0, Buffer.from([3]))]);
          passToWs(socket, both.subarray(0, 1));
          passToWs(socket, both.subarray(1));
          resolve();
        }),
      ),
      'the handshake',
    );
    const got = await within(messages, "frames emitted as 'data' on its socket: not parsed");
    expect(
      got.map((m) => [m.isBinary, m.data.toString('hex')]),
      changed("how it reads its socket (bytes emitted as 'data' are not parsed as frames)"),
    ).toEqual([
      [false, Buffer.from('fed as data').toString('hex')],
      [true, '010203'],
    ]);
    // What frame-demux.ts leaves to ws: a frame a client must refuse (masked, from a server).
    const refused = new Promise<string | undefined>((resolve) => peer.once('error', (err: NodeJS.ErrnoException) => resolve(err.code)));
    const closed = new Promise<void>((resolve) => peer.once('close', () => resolve()));
    passToWs(socket, Buffer.from([0x81, 0x81, 1, 2, 3, 4, 0x61]));
    expect(await within(refused, 'a masked server frame: no error'), changed('what it does with a masked server frame')).toBe('WS_ERR_UNEXPECTED_MASK');
    await within(closed, 'a masked server frame: the connection was not closed');
  });
});
