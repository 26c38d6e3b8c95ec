/**
 * The client against a scripted fake exec-server, for wire situations the real servers do
 * not produce on demand: the Codex dialect (no `jsonrpc`, error replies with id -1) and
 * tether's (id null); output before the start answer and before the resume handshake
 * completes; -32010 while the server has not noticed the old socket; a hole in the seq
 * numbers filled by `process/read`.
 */
import { WebSocketServer, type WebSocket } from 'ws';
import { afterEach, describe, expect, it } from 'vitest';
import { ExecClient, type StateChange } from '../../src/client/index.js';
import { collect, waitFor } from '../helpers/client-util.js';

type Handler = (msg: { id?: number | string; method: string; params: Record<string, unknown> }, ws: WebSocket, connection: number) => void;

let server: WebSocketServer | undefined;
const b64 = (text: string) => Buffer.from(text).toString('base64');
const send = (ws: WebSocket, message: object) => ws.send(JSON.stringify(message));

async function fakeServer(handler: Handler, options: { autoPong?: boolean } = {}): Promise<{ url: string; sockets: WebSocket[] }> {
  const sockets: WebSocket[] = [];
  server = new WebSocketServer({ host: '127.0.0.1', port: 0, autoPong: options.autoPong ?? true });
  await new Promise((resolve) => server!.once('listening', resolve));
  server.on('connection', (ws) => {
    sockets.push(ws);
    const n = sockets.length;
    ws.on('message', (data) => handler(JSON.parse(data.toString()), ws, n));
  });
  const { port } = server.address() as { port: number };
  return { url: `ws://127.0.0.1:${port}`, sockets };
}

afterEach(async () => {
  for (const ws of server?.clients ?? []) ws.terminate();
  await new Promise((resolve) => (server ? server.close(resolve) : resolve(undefined)));
  server = undefined;
});

const info = { cwd: 'file:///tmp', userHomeDir: 'file:///root', prependPathDirs: [] };

describe('ExecClient wire dialects and edge cases', () => {
  it('speaks the Codex dialect, ignores id -1 / id null error replies, keeps output sent before the start answer', async () => {
    const { url } = await fakeServer((msg, ws) => {
      if (msg.method === 'initialize') {
        send(ws, { error: { code: -32600, message: 'failed to parse websocket JSON-RPC message' }, id: -1 });
        send(ws, { jsonrpc: '2.0', error: { code: -32700, message: 'parse error' }, id: null });
        send(ws, { id: msg.id, result: { sessionId: 'sess-1', environmentInfo: info } });
      } else if (msg.method === 'process/start') {
        const processId = msg.params.processId as string;
        send(ws, { method: 'process/output', params: { processId, seq: 1, stream: 'stdout', chunk: b64('early\n') } });
        send(ws, { method: 'process/exited', params: { processId, seq: 2, exitCode: 4, sandboxDenied: false } });
        send(ws, { id: msg.id, result: { processId, sandboxType: 'none' } });
        send(ws, { method: 'process/closed', params: { processId, seq: 3 } });
      }
    });
    const warnings: string[] = [];
    const client = await ExecClient.connect(url, { jsonrpc: false, logger: (level, m) => level === 'warn' && warnings.push(m) });
    const proc = client.spawn(['x']);
    expect(await collect(proc.stdout)).toBe('early\n');
    expect(await proc.exited).toBe(4);
    expect(warnings.join('\n')).toMatch(/-32600.*-32700|-32600[\s\S]*-32700/);
    await client.close();
  });

  it('retries -32010, consumes notifications sent before the resume answer, and catches up by read', async () => {
    let attached = 0;
    const { url, sockets } = await fakeServer((msg, ws, n) => {
      if (msg.method === 'initialize') {
        if (n === 1) return send(ws, { jsonrpc: '2.0', id: msg.id, result: { sessionId: 'sess-2', environmentInfo: info } });
        expect(msg.params.resumeSessionId).toBe('sess-2');
        if (attached++ < 2) return send(ws, { jsonrpc: '2.0', id: msg.id, error: { code: -32010, message: 'session sess-2 is already attached to another connection' } });
        // Live output of the resumed session may precede the handshake answer.
        send(ws, { jsonrpc: '2.0', method: 'process/output', params: { processId: 'p', seq: 4, stream: 'stderr', chunk: b64('four\n') } });
        return send(ws, { jsonrpc: '2.0', id: msg.id, result: { sessionId: 'sess-2' } });
      }
      if (msg.method === 'process/start') {
        send(ws, { jsonrpc: '2.0', id: msg.id, result: { processId: 'p', sandboxType: 'none' } });
        send(ws, { jsonrpc: '2.0', method: 'process/output', params: { processId: 'p', seq: 1, stream: 'stdout', chunk: b64('one\n') } });
        return;
      }
      if (msg.method === 'process/read') {
        expect(msg.params.afterSeq).toBe(1);
        expect(msg.params.maxBytes ?? null).toBeNull();
        return send(ws, {
          jsonrpc: '2.0',
          id: msg.id,
          result: {
            chunks: [
              { seq: 2, stream: 'stdout', chunk: b64('two\n') },
              { seq: 3, stream: 'stdout', chunk: b64('three\n') },
              { seq: 4, stream: 'stderr', chunk: b64('four\n') },
            ],
            nextSeq: 7,
            exited: true,
            exitCode: 0,
            closed: true,
            failure: null,
            sandboxDenied: false,
          },
        });
      }
    });
    const client = await ExecClient.connect(url);
    const proc = client.spawn(['x'], { processId: 'p' });
    const out = collect(proc.stdout);
    const err = collect(proc.stderr);
    await waitFor(proc.stdout, 'data');
    const recovered = waitFor<StateChange>(client, 'state', (s) => s.state === 'connected');
    const retries: unknown[] = [];
    client.on('retry', (r) => retries.push(r));
    sockets[0]!.terminate();
    await recovered;
    expect(retries).toHaveLength(2);
    expect(client.generation).toBe(4);
    expect(await proc.exited).toBe(0);
    expect(await out).toBe('one\ntwo\nthree\n');
    expect(await err).toBe('four\n');
    await client.close();
  });

  it("Codex: a catch-up read answered 'process id … is starting' (output flowed, the start still in progress) is asked again, not a failure", async () => {
    let reads = 0;
    const { url, sockets } = await fakeServer((msg, ws, n) => {
      if (msg.method === 'initialize') return send(ws, { id: msg.id, result: { sessionId: 'st', environmentInfo: info } });
      if (msg.method === 'process/start' && n === 1) {
        // Output before the start answer, which never comes on this socket: it is cut first.
        return send(ws, { method: 'process/output', params: { processId: 'p', seq: 1, stream: 'stdout', chunk: b64('one\n') } });
      }
      if (msg.method === 'process/read') {
        expect(msg.params.afterSeq).toBe(1);
        // Codex, while the start it has not answered is still in progress.
        if (++reads <= 2) return send(ws, { id: msg.id, error: { code: -32600, message: 'process id p is starting' } });
        return send(ws, {
          id: msg.id,
          result: { chunks: [{ seq: 2, stream: 'stdout', chunk: b64('two\n') }], nextSeq: 5, exited: true, exitCode: 0, closed: true, failure: null, sandboxDenied: false },
        });
      }
    });
    const client = await ExecClient.connect(url, { jsonrpc: false });
    const proc = client.spawn(['x'], { processId: 'p' });
    const out = collect(proc.stdout);
    await waitFor(proc.stdout, 'data');
    sockets[0]!.terminate();
    expect(await proc.exited).toBe(0);
    expect(await out).toBe('one\ntwo\n');
    expect(reads).toBe(3);
    await client.close();
  });

  it('fills a hole in the notifications with process/read, without a reconnect', async () => {
    const { url } = await fakeServer((msg, ws) => {
      if (msg.method === 'initialize') return send(ws, { id: msg.id, result: { sessionId: 's', environmentInfo: info } });
      if (msg.method === 'process/start') {
        send(ws, { id: msg.id, result: { processId: 'h', sandboxType: 'none' } });
        send(ws, { method: 'process/output', params: { processId: 'h', seq: 1, stream: 'stdout', chunk: b64('a') } });
        send(ws, { method: 'process/output', params: { processId: 'h', seq: 3, stream: 'stdout', chunk: b64('c') } });
        return;
      }
      if (msg.method === 'process/read') {
        send(ws, { id: msg.id, result: { chunks: [{ seq: 2, stream: 'stdout', chunk: b64('b') }, { seq: 3, stream: 'stdout', chunk: b64('c') }], nextSeq: 4, exited: false, exitCode: null, closed: false, failure: null, sandboxDenied: false } });
        send(ws, { method: 'process/exited', params: { processId: 'h', seq: 4, exitCode: 0 } });
        send(ws, { method: 'process/closed', params: { processId: 'h', seq: 5 } });
      }
    });
    const client = await ExecClient.connect(url);
    const proc = client.spawn(['x'], { processId: 'h' });
    expect(await collect(proc.stdout)).toBe('abc');
    expect(client.generation).toBe(1);
    await client.close();
  });

  it('keepalive: a link that delivers frames is alive even if pongs are late; silence with a ping outstanding is death', async () => {
    let streaming: NodeJS.Timeout | undefined;
    let frames = 0;
    const { url } = await fakeServer(
      (msg, ws) => {
        if (msg.method === 'initialize') return send(ws, { id: msg.id, result: { sessionId: 'k', environmentInfo: info } });
        if (msg.method === 'process/start') {
          send(ws, { id: msg.id, result: { processId: 'k', sandboxType: 'none' } });
          let seq = 0;
          streaming = setInterval(() => {
            send(ws, { method: 'process/output', params: { processId: 'k', seq: ++seq, stream: 'stdout', chunk: b64('.') } });
            if (++frames === 12) clearInterval(streaming); // then silence: the link "dies"
          }, 50);
        }
      },
      { autoPong: false }, // pongs never come, like a pong stuck behind a long backlog
    );
    const client = await ExecClient.connect(url, { keepaliveIntervalMs: 50, keepaliveTimeoutMs: 200, recoveryDeadlineMs: 100 });
    const states: StateChange[] = [];
    client.on('state', (s: StateChange) => states.push(s));
    const proc = client.spawn(['x'], { processId: 'k' });
    let received = 0;
    proc.stdout.on('data', (chunk: Buffer) => (received += chunk.length));
    await waitFor<StateChange>(client, 'state', (s) => s.state === 'recovering');
    expect(received).toBe(12); // 600 ms of traffic with no pong did not count as a dead link
    expect(states[0]!.reason).toMatch(/no pong within 200 ms/);
    clearInterval(streaming);
    await client.close();
  });
});
