/**
 * Issue 22 item 10: one client cannot take the gateway's memory. Unfinished uploads to /mcp
 * are bounded (413 on a declared size over the cap, 503 + Retry-After past the uploads in
 * flight), MCP sessions are capped (the one idle the longest gives way), and a malformed path
 * is a 400, not a 500. Against `tether gateway` with default options and a bounded heap: it
 * stays up, and SIGTERM still stops it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { node, tetherBin } from '../helpers/mcp-peers.js';

const dir = mkdtempSync(path.join(tmpdir(), 'tether-gw-limits-'));
let child: ChildProcess;
let url: string;
let port: number;
const sockets: Socket[] = [];

beforeAll(async () => {
  const config = path.join(dir, 'empty.json');
  writeFileSync(config, JSON.stringify({ mcpServers: {} }));
  child = spawn(node, [tetherBin, 'gateway', '--config', config, '--listen', 'http://127.0.0.1:0'], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, NODE_OPTIONS: '--max-old-space-size=512' },
  });
  child.stderr!.resume();
  const [line] = (await once(createInterface({ input: child.stdout! }), 'line')) as [string];
  url = line;
  port = Number(new URL(url).port);
});

afterAll(() => {
  for (const s of sockets) s.destroy();
  if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

/** A raw connection that sends `head` (and `body`), resolving once `until` appears in what comes back. */
function raw(head: string, body: Buffer | string = ''): { socket: Socket; reply: (until: RegExp) => Promise<string> } {
  const socket = connect(port, '127.0.0.1');
  sockets.push(socket);
  let text = '';
  const waiters: (() => void)[] = [];
  socket.on('data', (d: Buffer) => {
    text += d.toString('latin1');
    for (const w of waiters.splice(0)) w();
  });
  socket.on('error', () => {});
  socket.write(head);
  if (body.length > 0) socket.write(body);
  const reply = (until: RegExp) =>
    new Promise<string>((resolve, reject) => {
      const check = () => (until.test(text) ? resolve(text) : waiters.push(check));
      socket.once('close', () => (until.test(text) ? resolve(text) : reject(new Error(`closed before ${until}: ${JSON.stringify(text)}`))));
      check();
    });
  return { socket, reply };
}

const INIT = JSON.stringify({
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'limits', version: '1' } },
});
const MCP_HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };

async function initialize(): Promise<{ status: number; session: string | null; retryAfter: string | null }> {
  const res = await fetch(`${url}/mcp`, { method: 'POST', headers: MCP_HEADERS, body: INIT });
  await res.text();
  return { status: res.status, session: res.headers.get('mcp-session-id'), retryAfter: res.headers.get('retry-after') };
}

async function ping(session: string): Promise<number> {
  const res = await fetch(`${url}/mcp`, {
    method: 'POST',
    headers: { ...MCP_HEADERS, 'mcp-session-id': session, 'mcp-protocol-version': '2025-06-18' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'ping' }),
  });
  await res.text();
  return res.status;
}

describe('tether gateway under a hostile client (default options)', () => {
  it('answers a malformed path 400', async () => {
    const res = await fetch(`${url}/mcp/servers/%E0%A4%A`);
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: string }).error).toMatch(/malformed path: bad percent-encoding/);
  });

  it('answers uploads past 16 in flight 503 + Retry-After, and a declared body over 4 MiB 413 at once', async () => {
    const post = (length: number) =>
      `POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\ncontent-length: ${length}\r\nexpect: 100-continue\r\n\r\n`;
    // 16 uploads of almost 4 MiB that never finish: "100 Continue" says each is being read.
    const uploads = Array.from({ length: 16 }, () => raw(post(4 * 1024 * 1024 - 1), Buffer.alloc(256 * 1024, 0x20)));
    for (const u of uploads) expect(await u.reply(/^HTTP\/1\.1 100 /)).toMatch(/^HTTP\/1\.1 100 /);
    const refused = await initialize();
    expect(refused).toMatchObject({ status: 503, retryAfter: '1' });

    const huge = raw(post(5 * 1024 * 1024));
    // (Node says "100 Continue" itself before the gateway sees the request: the answer follows.)
    expect(await huge.reply(/HTTP\/1\.1 [2-5]\d\d /)).toMatch(/HTTP\/1\.1 413 /);

    // Their places come back when they go.
    for (const u of uploads) u.socket.destroy();
    let after = refused;
    for (let i = 0; i < 200 && after.status === 503; i++) after = await initialize();
    expect(after.status).toBe(200);
  });

  it('caps MCP sessions at 256: the one idle the longest gives way, the newest works', async () => {
    const first = await initialize();
    expect(first.status).toBe(200);
    expect(await ping(first.session!)).toBe(200);
    let last = first;
    for (let i = 0; i < 256; i++) {
      last = await initialize();
      expect(last.status).toBe(200);
    }
    expect(await ping(first.session!)).toBe(404); // evicted: its client initializes again
    expect(await ping(last.session!)).toBe(200);
  }, 60_000);

  it('is still up, and SIGTERM stops it', async () => {
    expect((await fetch(`${url}/healthz`)).status).toBe(200);
    const exited = once(child, 'exit');
    child.kill('SIGTERM');
    const [code, signal] = await exited;
    expect({ code, signal }).toEqual({ code: 0, signal: null });
  });
});
