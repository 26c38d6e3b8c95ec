/**
 * The client half of the MCP floor for bench/floors.ts, run by the MCP host in place of
 * `tether mcp --url URL`: stdin's bytes go to the WebSocket as they are read, and every message
 * back goes to stdout. Nothing parsed, nothing numbered, nothing acknowledged.
 */
import WebSocket from 'ws';

const ws = new WebSocket(process.argv[2]!, { perMessageDeflate: false, skipUTF8Validation: true });
ws.on('open', () => {
  process.stdin.on('data', (chunk: Buffer) => ws.send(chunk, { binary: true }));
  process.stdin.once('end', () => ws.close());
});
ws.on('message', (data) => process.stdout.write(data as Buffer));
ws.once('close', () => process.exit(0));
ws.once('error', () => process.exit(1));
