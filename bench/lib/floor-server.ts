/**
 * The Node floor for bench/stream.ts: the least a Node server can do to stream a child's
 * output over a WebSocket. A text message "<bytes>" runs `head -c <bytes> /dev/zero`; each
 * pipe read goes out as one binary frame as it is (no header, no numbering, no retention),
 * the child's pipe paused while the socket holds more than 1 MiB; "done" (text) follows the
 * last byte. Run as its own process (like the servers it is compared with); prints its URL.
 */
import { spawn } from 'node:child_process';
import { WebSocketServer } from 'ws';

const HIGH_WATER = 1024 * 1024;
const LOW_WATER = 256 * 1024;

const wss = new WebSocketServer({ host: '127.0.0.1', port: 0, perMessageDeflate: false });
wss.on('listening', () => {
  const address = wss.address();
  process.stdout.write(`ws://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}\n`);
});
wss.on('connection', (ws) => {
  (ws as unknown as { _socket: { setNoDelay(on: boolean): void } })._socket.setNoDelay(true);
  ws.on('message', (data) => {
    const child = spawn('head', ['-c', String(Number(data.toString())), '/dev/zero'], { stdio: ['ignore', 'pipe', 'ignore'] });
    const stdout = child.stdout;
    const afterSend = (): void => {
      if (stdout.isPaused() && ws.bufferedAmount <= LOW_WATER) stdout.resume();
    };
    stdout.on('data', (chunk: Buffer) => {
      ws.send(chunk, { binary: true }, afterSend);
      if (ws.bufferedAmount > HIGH_WATER) stdout.pause();
    });
    child.on('close', () => ws.send('done'));
  });
});
process.on('SIGTERM', () => process.exit(0));
