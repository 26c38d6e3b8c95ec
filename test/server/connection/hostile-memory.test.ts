/**
 * Issue 22: one client can never take down the others by what it makes the server's heap or
 * send buffers hold. Each case runs a fresh `tether serve` (default options) as a child with
 * a 512 MiB heap, so a regression fails here instead of taking the machine down: the hostile
 * client is refused or held back, the server stays alive, another session keeps being
 * answered, and SIGTERM still stops it.
 */
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { ErrorCode } from '../../../src/protocol/index.js';
import { RawClientPool, type Frame, type RawClient } from '../../helpers/raw-client.js';
import { spawnServe, type ServeProcess } from '../../helpers/serve-process.js';

const CWD = pathToFileURL(tmpdir()).href;
const ENV = { PATH: process.env.PATH ?? '/usr/bin:/bin' };
const KiB = 1024;
const MiB = 1024 * 1024;

let served: ServeProcess | undefined;
let home: string | undefined;
const pool = new RawClientPool();
afterEach(async () => {
  await pool.dropAll();
  await served?.stop();
  served = undefined;
  if (home) rmSync(home, { recursive: true, force: true });
  home = undefined;
});

/** A default server with a bounded heap; CODEX_HOME in a fresh directory of its own. */
async function serve(args: string[] = []): Promise<{ served: ServeProcess; exited: Promise<string> }> {
  home = mkdtempSync(join(tmpdir(), 'tether-hostile-'));
  served = await spawnServe(['--listen', 'ws://127.0.0.1:0', ...args], {
    env: { NODE_OPTIONS: '--max-old-space-size=512', CODEX_HOME: home },
  });
  const child = served.child;
  const exited = once(child, 'exit').then(([code, signal]) => `server exited (${signal ?? code}): ${served?.stderr().slice(-400)}`);
  return { served, exited };
}

/** The frame answering `id`, or the reason the server died first. */
function answer(c: RawClient, id: number, exited: Promise<string>, timeoutMs = 60_000): Promise<Frame | string> {
  return Promise.race([c.waitFor((f) => f.id === id, timeoutMs, true), exited]);
}

/** Another session is answered, the server is alive, and SIGTERM stops it (no SIGKILL needed). */
async function othersStillServed(s: ServeProcess): Promise<void> {
  const other = await pool.connect(s.url);
  await other.handshake('bystander');
  expect(await other.request('environment/status', {})).toEqual({ status: 'ready' });
  expect(s.child.exitCode).toBeNull();
  await pool.dropAll();
  await s.stop();
  expect(s.child.signalCode).not.toBe('SIGKILL');
  expect(s.stderr()).toMatch(/SIGTERM: shutting down/);
}

/** The resident set of process `pid`, bytes. */
function rssOf(pid: number): number {
  const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) * KiB : 0;
}

/**
 * `count` masked WebSocket text frames of `json` (mask key 0: the payload as is), ready to be
 * written to a client's socket at once: a flood as fast as the socket takes it.
 */
function maskedFrames(json: string, count: number): Buffer {
  const payload = Buffer.from(json);
  if (payload.length > 125) throw new Error('one short frame only');
  const frame = Buffer.concat([Buffer.from([0x81, 0x80 | payload.length, 0, 0, 0, 0]), payload]);
  const all = Buffer.alloc(frame.length * count);
  for (let i = 0; i < count; i++) frame.copy(all, i * frame.length);
  return all;
}

async function memoryHeld(url: string, holder: string): Promise<number> {
  const body = await new Promise<string>((resolve, reject) => {
    request(`${url.replace('ws:', 'http:')}/metrics`, (res) => {
      let text = '';
      res.on('data', (d: Buffer) => (text += d.toString()));
      res.on('end', () => resolve(text));
    })
      .on('error', reject)
      .end();
  });
  const line = body.split('\n').find((l) => l.startsWith(`tether_memory_held_bytes{holder="${holder}"}`));
  if (!line) throw new Error(`no tether_memory_held_bytes for ${holder} in /metrics`);
  return Number(line.split(' ').pop());
}

describe('hostile clients and the heap (issue 22)', () => {
  it('refuses unparsed a frame of millions of tiny values (16 long-polls of 16 MiB `{},` frames), answering each with its id', async () => {
    const { served: s, exited } = await serve();
    // Just under the 16 MiB message limit: some 5.6 million empty objects, ~357 MiB parsed.
    const head = '{"id":9999,"method":"process/read","params":{"processId":"p","afterSeq":0,"waitMs":60000,"pad":[';
    const tail = '{}]}}';
    const frame = head + '{},'.repeat(Math.floor((16 * MiB - 64 - head.length - tail.length) / 3)) + tail;
    expect(frame.length).toBeLessThan(16 * MiB);
    const bombers: RawClient[] = [];
    for (let i = 0; i < 16; i++) {
      const c = await pool.connect(s.url);
      await c.handshake(`bomber-${i}`);
      expect((await c.call('process/start', { processId: 'p', argv: ['sleep', '60'], cwd: CWD, env: ENV, tty: false })).error).toBeUndefined();
      bombers.push(c);
    }
    // All 16 long-polls at once: held together they would be 16 x 357 MiB.
    const bytes = Buffer.from(frame);
    for (const c of bombers) c.sendRaw(bytes);
    for (const [i, c] of bombers.entries()) {
      const reply = await answer(c, 9999, exited);
      expect(reply, `frame ${i}`).toMatchObject({
        id: 9999,
        error: { code: ErrorCode.InvalidRequest, message: expect.stringMatching(/^message refused unparsed: its \d+ JSON values would hold about .* once parsed/) },
      });
      // The connection carries on: a small request is answered.
      expect(await c.request('environment/status', {})).toEqual({ status: 'ready' });
    }
    await othersStillServed(s);
  }, 120_000);

  it('session/list answers within its cap however much argv the processes have (argv cut, flagged)', async () => {
    const { served: s, exited } = await serve();
    const c = await pool.connect(s.url);
    await c.request('initialize', { clientName: 'lister', tether: { version: 1, extensions: ['sessionList'] } });
    c.notify('initialized', {});
    // 56 processes of 14 arguments of 120 KiB of \x01 each (the kernel's limits: 128 KiB an
    // argument, 2 MiB in all): listed whole, the answer would escape to ~600 M characters,
    // past the longest string V8 can make.
    const arg = '\u0001'.repeat(120 * KiB);
    const argv = ['sh', '-c', 'sleep 60', ...Array.from({ length: 14 }, () => arg)];
    for (let i = 0; i < 56; i++) {
      const started = await Promise.race([c.call('process/start', { processId: `p${i}`, argv, cwd: CWD, env: ENV, tty: false }), exited]);
      expect(started, `start ${i}`).toMatchObject({ result: { processId: `p${i}` } });
    }
    const id = 1000;
    c.send({ id, method: 'session/list', params: {} });
    const reply = await answer(c, id, exited);
    expect(reply).toMatchObject({ id, result: { scope: 'own', sessions: expect.any(Array) } });
    const result = (reply as Frame).result;
    expect(result.sessions).toHaveLength(1);
    const listed = result.sessions[0].processes as Array<{ argv: string[]; argvTruncated?: boolean }>;
    expect(listed).toHaveLength(56);
    for (const p of listed) {
      expect(p.argvTruncated).toBe(true);
      expect(p.argv.slice(0, 3)).toEqual(['sh', '-c', 'sleep 60']);
      expect(p.argv.join('').length).toBe(4096);
    }
    await othersStillServed(s);
  }, 120_000);

  it('environmentConfig/read of a 150 MiB config.toml is refused unread with a clear error', async () => {
    const { served: s, exited } = await serve();
    // A literal string of backslashes: read whole and re-escaped, 150 M replacements.
    writeFileSync(join(home!, 'config.toml'), `mcp_servers = '${'\\'.repeat(150 * MiB)}'\n`);
    const c = await pool.connect(s.url);
    await c.handshake('configurer');
    c.send({ id: 7, method: 'environmentConfig/read', params: { cwd: CWD, configPaths: [['mcp_servers']], requirementsPaths: [] } });
    const reply = await answer(c, 7, exited);
    expect(reply).toMatchObject({
      id: 7,
      error: {
        code: ErrorCode.InternalError,
        message: expect.stringMatching(/^failed to load executor-local config: .*config\.toml: the file is 150MiB, larger than the 1\.0MiB tether reads$/),
      },
    });
    await othersStillServed(s);
  }, 120_000);

  it('a client that asks for big answers without reading its socket has about the high-water mark queued, not one answer per request', async () => {
    const { served: s, exited } = await serve();
    // Just under the config size cap: each answer carries ~900 KiB of TOML.
    const value = 'a'.repeat(900 * KiB);
    writeFileSync(join(home!, 'config.toml'), `mcp_servers = "${value}"\n`);
    const params = { cwd: CWD, configPaths: [['mcp_servers']], requirementsPaths: [] };
    const hog = await pool.connect(s.url);
    await hog.handshake('hog');
    const reader = await pool.connect(s.url);
    await reader.handshake('reader');
    // The hog stops reading its socket, then asks for 40 answers (36 MiB of them).
    (hog.ws as unknown as { _socket: { pause(): void; resume(): void } })._socket.pause();
    const ids = Array.from({ length: 40 }, (_, i) => 100 + i);
    for (const id of ids) hog.send({ id, method: 'environmentConfig/read', params });
    // Another session keeps being answered meanwhile: 40 of the same reads, one after another
    // (the hog's reads, issued before, have had their turn by then).
    for (let i = 0; i < 40; i++) {
      const r = await Promise.race([reader.request('environmentConfig/read', params), exited]);
      expect(typeof r, `read ${i}`).not.toBe('string');
    }
    // Unread answers wait on the server: past the kernel's socket buffers, about the
    // high-water mark (1 MiB) and one answer, never the 36 MiB asked for.
    const queued = await memoryHeld(s.url, 'send');
    expect(queued).toBeLessThan(8 * MiB);
    // Once the hog reads, every answer arrives, whole: nothing was lost by waiting.
    (hog.ws as unknown as { _socket: { resume(): void } })._socket.resume();
    for (const id of ids) {
      const reply = await answer(hog, id, exited);
      expect((reply as Frame).result?.config.layers[0].toml, `answer ${id}`).toBe(`mcp_servers = "${value}"\n`);
    }
    await othersStillServed(s);
  }, 120_000);

  it('a client that floods small requests without reading is held back once its send buffer is over the mark, then read again', async () => {
    const { served: s, exited } = await serve();
    const hog = await pool.connect(s.url);
    await hog.handshake('flooder');
    const socket = (hog.ws as unknown as { _socket: { pause(): void; resume(): void } })._socket;
    socket.pause();
    // 20 000 requests whose answers echo 2 KiB each (an unknown method's name): 40 MB of
    // answers, far past what the kernel's socket buffers take.
    const method = `no/such/${'x'.repeat(2 * KiB)}`;
    const count = 20_000;
    for (let i = 0; i < count; i++) hog.send({ id: 10_000 + i, method, params: {} });
    // Held back: at 64 requests waiting for the send buffer the server stops reading this
    // socket (they count as requests in flight meanwhile), and the buffer stays near its mark.
    for (;;) {
      const [input, send] = await Promise.all([memoryHeld(s.url, 'input'), memoryHeld(s.url, 'send')]);
      // The mark (1 MiB) and what one read of the socket brought in: far under 4 MiB.
      expect(send, 'send buffer').toBeLessThan(4 * MiB);
      if (input >= 64 * 2 * KiB) break;
      // Polling /metrics for a state, not waiting for time to pass: the loop ends on the condition.
      expect(await Promise.race([new Promise((r) => setTimeout(() => r('poll'), 20)), exited])).toBe('poll');
    }
    const other = await pool.connect(s.url);
    await other.handshake('bystander-while-flooded');
    expect(await other.request('environment/status', {})).toEqual({ status: 'ready' });
    // Once it reads, every request is answered, in order.
    socket.resume();
    const last = await answer(hog, 10_000 + count - 1, exited);
    expect(last).toMatchObject({ error: { code: ErrorCode.MethodNotFound } });
    const answered = hog.frames.filter((f) => typeof f.id === 'number' && f.id >= 10_000).map((f) => f.id);
    expect(answered).toEqual(Array.from({ length: count }, (_, i) => 10_000 + i));
    await othersStillServed(s);
  }, 120_000);

  it('an environment/info amplifier that does not read is held back under --memory-budget 256MiB: RSS under the budget plus 128 MiB, a victim streams', async () => {
    const BUDGET = 256 * MiB;
    // What the server may hold past its budget here: Node itself, its heap, the kernel's view
    // of the sockets. The flood alone would queue ~590 MB of answers without the bound.
    const BOUND = BUDGET + 128 * MiB;
    const { served: s, exited } = await serve(['--memory-budget', '256MiB']);
    const pid = s.child.pid!;
    let peakRss = rssOf(pid);
    const sample = (): void => {
      peakRss = Math.max(peakRss, rssOf(pid));
      // Past the bound the test has failed: stop the server before it takes the machine down.
      if (peakRss > BOUND) s.child.kill('SIGKILL');
    };
    const victim = await pool.connect(s.url);
    await victim.handshake('victim');
    const amplifier = await pool.connect(s.url);
    await amplifier.handshake('amplifier');
    const socket = (amplifier.ws as unknown as { _socket: { pause(): void; write(b: Buffer): boolean; destroy(): void } })._socket;
    socket.pause();
    // 700,000 requests of 48 bytes, each answered with ~840: written as fast as the socket takes them.
    const request = '{"id":1,"method":"environment/info","params":{}}';
    socket.write(maskedFrames(request, 700_000));
    // The victim streams meanwhile: 200,000 lines, every one once, in order.
    await victim.request('process/start', { processId: 'v', argv: ['seq', '1', '200000'], cwd: CWD, env: ENV, tty: false });
    let victimClosed = false;
    void victim.waitClosed('v', 110_000).then(() => (victimClosed = true));
    // Until the amplifier is held back (at 64 requests waiting the server stops reading it:
    // they count as requests in flight) and the victim's process closed. Polling /metrics
    // and RSS for a state, not waiting for time to pass: the loop ends on the condition.
    for (;;) {
      sample();
      expect(peakRss, 'RSS').toBeLessThan(BOUND);
      const [input, send] = await Promise.all([memoryHeld(s.url, 'input'), memoryHeld(s.url, 'send')]);
      // The mark (1 MiB) and what one read of the socket brought in: far under 4 MiB.
      expect(send, 'send buffers').toBeLessThan(4 * MiB);
      if (input >= 64 * request.length && victimClosed) break;
      expect(await Promise.race([new Promise((r) => setTimeout(() => r('poll'), 50)), exited])).toBe('poll');
    }
    const streamed = victim.notifications
      .filter((n) => n.method === 'process/output' && n.params.processId === 'v')
      .map((n) => Buffer.from(n.params.chunk, 'base64').toString())
      .join('');
    expect(streamed).toBe(Array.from({ length: 200_000 }, (_, i) => `${i + 1}\n`).join(''));
    // The amplifier leaves: what it held comes back to the budget.
    socket.destroy();
    for (;;) {
      const [input, send] = await Promise.all([memoryHeld(s.url, 'input'), memoryHeld(s.url, 'send')]);
      if (input === 0 && send === 0) break;
      expect(await Promise.race([new Promise((r) => setTimeout(() => r('poll'), 50)), exited])).toBe('poll');
    }
    sample();
    process.stdout.write(`environment/info amplifier: peak RSS ${(peakRss / MiB).toFixed(0)} MiB (bound ${BOUND / MiB} MiB), after it left ${(rssOf(pid) / MiB).toFixed(0)} MiB\n`);
    expect(peakRss).toBeLessThan(BOUND);
    await othersStillServed(s);
  }, 120_000);
});
