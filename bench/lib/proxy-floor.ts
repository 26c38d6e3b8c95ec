/**
 * The Node floor for bench/relay.ts: the least a relay process can do. Each downstream
 * WebSocket gets its own upstream WebSocket to `--to URL`, and every message goes across as
 * it is, in both directions (text stays text, binary stays binary): no parsing, no sessions,
 * no numbering, no retention, nothing held through a cut. Backpressure as a relay needs it:
 * a side's socket is paused while the other side holds more than 1 MiB unsent. Run as its own
 * process, like the relay it is compared with; prints its URL.
 */
import type { Socket } from 'node:net';
import WebSocket, { WebSocketServer } from 'ws';

const HIGH_WATER = 1024 * 1024;
const LOW_WATER = 256 * 1024;
const to = process.argv[process.argv.indexOf('--to') + 1]!;

const socketOf = (ws: WebSocket): Socket => (ws as unknown as { _socket: Socket })._socket;

/** Sends what `from` receives on `into`, pausing `from` while `into` is backed up. */
function pipe(from: WebSocket, into: WebSocket): void {
  const resume = (): void => {
    if (socketOf(from).isPaused() && into.bufferedAmount <= LOW_WATER) socketOf(from).resume();
  };
  from.on('message', (data, isBinary) => {
    into.send(data as Buffer, { binary: isBinary }, resume);
    if (into.bufferedAmount > HIGH_WATER) socketOf(from).pause();
  });
  from.on('close', () => into.close());
}

const wss = new WebSocketServer({ host: '127.0.0.1', port: 0, perMessageDeflate: false, skipUTF8Validation: true, maxPayload: 256 * 1024 * 1024 });
wss.on('listening', () => {
  const address = wss.address();
  process.stdout.write(`ws://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}\n`);
});
wss.on('connection', (down) => {
  socketOf(down).setNoDelay(true);
  const up = new WebSocket(to, { perMessageDeflate: false, skipUTF8Validation: true, maxPayload: 256 * 1024 * 1024 });
  // Messages the client sends before the upstream is open wait in order.
  const early: Array<[Buffer, boolean]> = [];
  const hold = (data: unknown, isBinary: boolean): void => void early.push([data as Buffer, isBinary]);
  down.on('message', hold);
  up.once('open', () => {
    socketOf(up).setNoDelay(true);
    down.off('message', hold);
    for (const [data, isBinary] of early) up.send(data, { binary: isBinary });
    pipe(down, up);
    pipe(up, down);
  });
  up.on('error', () => down.close());
  down.on('error', () => up.close());
});
process.on('SIGTERM', () => process.exit(0));
