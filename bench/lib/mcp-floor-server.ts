/**
 * The server half of the MCP floor for bench/floors.ts: the least a remote stdio path does on
 * the server's side. Each WebSocket gets its own child (`-- COMMAND ARGS...`), and bytes cross
 * as they are: a message's bytes to the child's stdin, each stdout read as one binary
 * message. No JSON-RPC, no sessions, no numbering, no retention, nothing held through a cut.
 * Run as its own process, like `tether serve`; prints its URL.
 */
import { spawn } from 'node:child_process';
import { WebSocketServer } from 'ws';

const dashDash = process.argv.indexOf('--');
const [command, ...args] = process.argv.slice(dashDash + 1);

const wss = new WebSocketServer({ host: '127.0.0.1', port: 0, perMessageDeflate: false, skipUTF8Validation: true });
wss.on('listening', () => {
  const address = wss.address();
  process.stdout.write(`ws://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}\n`);
});
wss.on('connection', (ws) => {
  const child = spawn(command!, args, { stdio: ['pipe', 'pipe', 'ignore'] });
  child.stdout.on('data', (chunk: Buffer) => ws.send(chunk, { binary: true }));
  child.stdin.on('error', () => ws.close());
  child.once('exit', () => ws.close());
  ws.on('message', (data) => child.stdin.write(data as Buffer));
  ws.on('close', () => child.kill());
});
