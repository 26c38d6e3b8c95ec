/**
 * Every place tether goes around the `ws` package's public API, in one module.
 * Call sites use only these functions; test/util/ws-contract.test.ts checks each assumption below
 * against the installed `ws` and fails with "ws X.Y.Z changed ..." when an upgrade breaks one.
 *
 * Checked against ws 8.23.0 (package.json asks for ^8.23.0), reading node_modules/ws/lib:
 *
 * Server side (websocket.js, websocket-server.js):
 * 1. `rawSocketOf`: a WebSocket keeps its TCP socket (a net.Socket, the one handed to
 *    `handleUpgrade`) in the private `_socket` field once open (`setSocket`). binary-output.ts
 *    writes whole WebSocket frames straight onto it. That is sound only because
 *    - tether never negotiates permessage-deflate, and without it `ws`'s Sender writes each
 *      frame synchronously (it queues only while deflating), so nothing of `ws`'s can be
 *      half-written when ours go out;
 *    - `ws.bufferedAmount` is `_socket._writableState.length + _sender._bufferedBytes`, so
 *      bytes written around `ws` still count in the backpressure and stall checks that
 *      read `bufferedAmount` (server/connection.ts, server/index.ts).
 * 2. `giveCloseReason`: when a message exceeds `maxPayload` (or on any other protocol error)
 *    the receiver's error handler (`receiverOnError`) calls `websocket.close(code)` through
 *    the instance, with no reason, so an own `close` property on the instance sees that
 *    call and can add one.
 * 3. `afterWsReads`: `handleUpgrade` calls `setSocket` (which adds `ws`'s own 'data'
 *    listener to the socket) before its callback runs, and the receiver parses a chunk and
 *    emits its 'message'/'ping'/'pong' synchronously inside that listener
 *    (`allowSynchronousEvents`, default true since 8.17): a 'data' listener added in the
 *    callback runs after `ws` has seen the same chunk (server/receive-meter.ts).
 *
 * Client side (websocket.js initAsClient):
 * 4. `netConnectOptions`: `ws` calls `options.createConnection` with its request options
 *    (through Node's http client), options net.connect takes: host and port, or for
 *    `ws+unix:` the socket's path as `socketPath` (Node 20's http client already copies it to
 *    `path`; `ws`'s own `netConnect` copies it again, and so does this).
 * 5. `passToWs`: once the upgrade is done `ws` reads its socket only through a 'data'
 *    listener (`socketOnData`), added in `setSocket` before it emits 'open' (and any bytes
 *    that came with the upgrade response are `unshift`ed back first), so bytes emitted as
 *    'data' on that socket from 'open' on are parsed as frames, in order
 *    (client/demux-socket.ts feeds it what client/frame-demux.ts does not take).
 */
import type { NetConnectOpts, Socket } from 'node:net';
import type WebSocket from 'ws';

/** The `ws` version these assumptions were read from (see above). */
export const WS_CHECKED_VERSION = '8.23.0';

/**
 * The TCP socket under an open server-side WebSocket, to write whole frames to (see 1).
 * Only while `ws.readyState === OPEN`, with no permessage-deflate.
 */
export function rawSocketOf(ws: WebSocket): Socket {
  return (ws as unknown as { _socket: Socket })._socket;
}

/**
 * From now on, a close of `ws` with `code` and no reason (as `ws` itself closes on a
 * protocol error, e.g. 1009 for an oversized message) is sent with `reason` (see 2).
 */
export function giveCloseReason(ws: WebSocket, code: number, reason: string): void {
  const close = ws.close.bind(ws);
  ws.close = (closeCode?: number, closeReason?: string | Buffer) => close(closeCode, closeCode === code && !closeReason ? reason : closeReason);
}

/**
 * Listens to the bytes `ws` reads from a server-side socket, each chunk after `ws` has
 * parsed it (see 3). Call it from `handleUpgrade`'s callback.
 */
export function afterWsReads(socket: Socket, listener: (chunk: Buffer) => void): void {
  socket.on('data', listener);
}

/** What `ws` passes to `createConnection` (see 4). */
export type WsConnectOptions = NetConnectOpts & { socketPath?: string };

/** Options for net.connect from what `ws` passes to `createConnection`, as its own netConnect does (see 4). */
export function netConnectOptions(options: WsConnectOptions): NetConnectOpts {
  return { ...options, path: options.socketPath } as NetConnectOpts;
}

/** Hands bytes read from a client socket to `ws`'s parser (see 5). `bytes` is then `ws`'s. */
export function passToWs(socket: Socket, bytes: Buffer): void {
  socket.emit('data', bytes);
}
