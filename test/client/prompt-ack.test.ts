/**
 * The prompt ACK for servers that leave Nagle's algorithm on (src/client/prompt-ack.ts): the
 * bookkeeping alone, then the client against a scripted server in each dialect. A Codex
 * exec-server holds its output behind an unacknowledged answer until our kernel's delayed
 * ACK (bench/relay.ts: a Codex echo took 44 ms, 0.4 ms with these pongs); this proves the
 * frame that carries the ACK is sent, and only where it is needed.
 */
import { WebSocketServer, type WebSocket } from 'ws';
import { afterEach, describe, expect, it } from 'vitest';
import { ExecClient } from '../../src/client/index.js';
import { BULK_BYTES, PromptAck, SPACING_MS } from '../../src/client/prompt-ack.js';

describe('PromptAck', () => {
  const setup = () => {
    const queued: Array<() => void> = [];
    const timers: Array<{ at: number; callback: () => void }> = [];
    let now = 1000;
    let acks = 0;
    const ack = new PromptAck(
      () => acks++,
      (callback) => queued.push(callback),
      (callback, ms) => timers.push({ at: now + ms, callback }),
      () => now,
    );
    ack.enabled = true;
    const turn = () => queued.splice(0).forEach((callback) => callback());
    /** The clock moves on `ms`; the timers due run. */
    const advance = (ms: number) => {
      now += ms;
      for (const due of timers.filter((t) => t.at <= now)) {
        timers.splice(timers.indexOf(due), 1);
        due.callback();
      }
    };
    return { ack, turn, advance, acks: () => acks, timers: () => timers.length };
  };

  it('acknowledges a read once, at the end of the turn, however many reads the turn had', () => {
    const { ack, turn, acks } = setup();
    ack.read();
    ack.read();
    ack.read();
    expect(acks()).toBe(0);
    turn();
    expect(acks()).toBe(1);
    turn();
    expect(acks()).toBe(1);
    ack.read();
    turn();
    expect(acks()).toBe(2);
  });

  it('owes nothing once something was sent after the read (that carried the ACK)', () => {
    const { ack, turn, acks } = setup();
    ack.read();
    ack.sent();
    turn();
    expect(acks()).toBe(0);
    // A read after the send is owed again.
    ack.read();
    ack.sent();
    ack.read();
    turn();
    expect(acks()).toBe(1);
  });

  it('does nothing until enabled', () => {
    const { ack, turn, acks } = setup();
    ack.enabled = false;
    ack.read();
    turn();
    expect(acks()).toBe(0);
  });

  it('while output streams in, one pong per spacing, not one per turn, and the last read still gets its pong within it', () => {
    const { ack, turn, advance, acks, timers } = setup();
    // 16 KiB messages, 10 turns per ms, for 5 ms: 50 turns that read.
    for (let i = 0; i < 50; i++) {
      ack.read(16 * 1024);
      turn();
      advance(SPACING_MS / 10);
    }
    expect(acks()).toBeGreaterThanOrEqual(4);
    expect(acks()).toBeLessThanOrEqual(6);
    // The stream stops: the pong owed for its last read goes out within the spacing.
    const before = acks();
    ack.read(16 * 1024);
    turn();
    advance(SPACING_MS);
    expect(acks()).toBe(before + 1);
    expect(timers()).toBe(0);
  });

  it('a small read (an answer, a line) is acknowledged in its turn, even right after a pong', () => {
    const { ack, turn, acks } = setup();
    ack.read(BULK_BYTES);
    turn();
    expect(acks()).toBe(1);
    ack.read(100);
    turn();
    expect(acks()).toBe(2);
  });

  it('a pong held for the spacing is dropped if something was sent meanwhile (it carried the ACK)', () => {
    const { ack, turn, advance, acks } = setup();
    ack.read(BULK_BYTES);
    turn();
    ack.read(BULK_BYTES);
    turn();
    expect(acks()).toBe(1);
    ack.sent();
    advance(SPACING_MS);
    expect(acks()).toBe(1);
  });
});

let server: WebSocketServer | undefined;
afterEach(async () => {
  for (const ws of server?.clients ?? []) ws.terminate();
  await new Promise((resolve) => (server ? server.close(resolve) : resolve(undefined)));
  server = undefined;
});

/**
 * A server that answers `initialize` (with `tether` extensions or without: the Codex dialect)
 * and every other request with `{}`, and logs what it sent and received, pongs included.
 */
async function scriptedServer(accepts: string[] | null): Promise<{ url: string; log: string[] }> {
  const log: string[] = [];
  server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await new Promise((resolve) => server!.once('listening', resolve));
  server.on('connection', (ws: WebSocket) => {
    ws.on('pong', () => log.push('pong'));
    ws.on('message', (data) => {
      const msg = JSON.parse(data.toString()) as { id?: number; method: string };
      if (msg.id === undefined) return; // initialized
      log.push(msg.method);
      const result =
        msg.method === 'initialize'
          ? { sessionId: 's', environmentInfo: { cwd: 'file:///tmp', userHomeDir: 'file:///root', prependPathDirs: [] }, ...(accepts ? { tether: { version: 1, extensions: accepts } } : {}) }
          : {};
      ws.send(JSON.stringify({ id: msg.id, result }));
    });
  });
  const { port } = server.address() as { port: number };
  return { url: `ws://127.0.0.1:${port}`, log };
}

/** Two requests, the second only once the turns that follow the first answer have run. */
async function twoRequests(url: string): Promise<void> {
  const client = await ExecClient.connect(url, { keepaliveIntervalMs: 0 });
  await client.request('first/call', {});
  // The prompt ACK goes out at the end of the turn that read the answer: let two turns pass.
  await new Promise((resolve) => setImmediate(resolve));
  await new Promise((resolve) => setImmediate(resolve));
  await client.request('second/call', {});
  await client.close();
}

describe('ExecClient acknowledges a Codex server promptly', () => {
  it('after an answer from a server in the Codex dialect, a pong goes back before anything else', async () => {
    const { url, log } = await scriptedServer(null);
    await twoRequests(url);
    expect(log).toEqual(['initialize', 'first/call', 'pong', 'second/call']);
  });

  it('a tether server (it sets TCP_NODELAY) gets none', async () => {
    const { url, log } = await scriptedServer(['sessionClose']);
    await twoRequests(url);
    // (then the close's session/close)
    expect(log.slice(0, 3)).toEqual(['initialize', 'first/call', 'second/call']);
    expect(log).not.toContain('pong');
  });
});
