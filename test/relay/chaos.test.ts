/**
 * `tether relay` with its upstream link cut by traffic (a seeded byte quota per connection,
 * never by time): the downstream client never sees an error, a duplicate or a gap; a
 * mutating fs call in flight at a cut is applied once (answered from the upstream's memory
 * with tether's `fsResume`, "outcome unknown" from an upstream without it, as Codex's); an
 * upstream session that expired becomes Codex's unknown-session and unknown-process errors.
 * Loopback only, bounded.
 */
import { mkdtempSync, existsSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ChaosProxy } from '../../src/chaos/proxy.js';
import { seededRandom } from '../../src/chaos/random.js';
import { ExecClient } from '../../src/client/index.js';
import { ErrorCode, Messages } from '../../src/protocol/index.js';
import { startRelay, type Relay } from '../../src/relay/relay.js';
import { startServer, type TetherServer } from '../../src/server/index.js';
import { collect, waitFor } from '../helpers/client-util.js';
import { RawClient } from '../helpers/raw-client.js';
import { serverInternals } from '../../src/server/server.js';

let upstream: TetherServer;
let proxy: ChaosProxy;
let dir: string;
const relays: Relay[] = [];

async function relayTo(extensions?: []): Promise<Relay> {
  const relay = await startRelay({ to: proxy.url, upstream: { recoveryDeadlineMs: 20_000, ...(extensions ? { extensions } : {}) } });
  relays.push(relay);
  return relay;
}

beforeAll(async () => {
  upstream = await startServer({ port: 0, sessionTtlMs: 60_000 });
  proxy = await ChaosProxy.inFrontOf(upstream.url);
  dir = mkdtempSync(join(tmpdir(), 'tether-relay-chaos-'));
});

afterEach(async () => {
  proxy.heal();
  await Promise.all(relays.splice(0).map((r) => r.close()));
});

afterAll(async () => {
  await proxy?.close();
  await upstream?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** Counts the upstream connections the proxy cut by their quota. */
function countQuotaCuts(): { readonly count: number } {
  const seen = { count: 0 };
  proxy.on('close', (_report, reason) => {
    if (reason === 'quota') seen.count++;
  });
  return seen;
}

describe('tether relay, upstream cut by traffic', () => {
  it('a Codex-dialect client sees no error: output byte-exact, every write and mutating fs call applied once', async () => {
    const relay = await relayTo();
    const client = await ExecClient.connect(relay.url, { clientName: 'relay-chaos', extensions: [] });
    const downstreamTrouble: string[] = [];
    client.on('state', (s) => s.state !== 'connected' && downstreamTrouble.push(s.state));
    const cuts = countQuotaCuts();
    const random = seededRandom(2501);
    // Counted upstream (requests, writes, acks): a resume's replay of output comes down and is
    // not counted, so every new connection gets far enough to make progress.
    proxy.cutEachAfter(() => 1_500 + random() * 4_500, { direction: 'up' });
    try {
      const counters = [0, 1].map((k) => {
        const lines = 3000;
        const proc = client.spawn(['perl', '-e', `$|=1; for my $i (1..${lines}) { print "c${k}-$i\\n" } exit ${k + 3};`]);
        return { proc, out: collect(proc.stdout), expected: Array.from({ length: lines }, (_, i) => `c${k}-${i + 1}\n`).join(''), code: k + 3 };
      });
      const echo = client.spawn(['perl', '-e', '$|=1; while (my $l = <STDIN>) { print "echo $l"; exit 0 if $l eq "w40\\n" }'], { pipeStdin: true });
      const echoed = collect(echo.stdout);
      for (let j = 1; j <= 40; j++) {
        await new Promise<void>((resolve, reject) => echo.stdin!.write(`w${j}\n`, (err) => (err ? reject(err) : resolve())));
      }
      // Files: written, read back, removed without force (a second removal would be ENOENT).
      for (let j = 0; j < 30; j++) {
        const file = join(dir, `f${j}`);
        const content = `file ${j} `.repeat(200 + j);
        await client.fs.writeFile(file, content);
        expect(await client.fs.readFile(file, 'utf8')).toBe(content);
        await client.request('fs/remove', { path: pathToFileURL(file).href, recursive: false, force: false });
        expect(existsSync(file)).toBe(false);
      }
      for (const c of counters) {
        expect(await c.proc.exited).toBe(c.code);
        expect(await c.out).toBe(c.expected);
      }
      expect(await echo.exited).toBe(0);
      expect(await echoed).toBe(Array.from({ length: 40 }, (_, j) => `echo w${j + 1}\n`).join(''));
      expect(downstreamTrouble).toEqual([]); // the downstream link never noticed a thing
    } finally {
      proxy.stopCuttingAfterBytes();
      await client.close();
    }
    expect(cuts.count).toBeGreaterThan(3); // the upstream link really was cut, several times
  });

  it('a mutating fs call whose answer is lost at a cut is applied once: tether upstream answers it, a Codex-like one is "outcome unknown"', async () => {
    for (const codexLike of [false, true]) {
      const relay = await relayTo(codexLike ? [] : undefined);
      expect(relay.backend.extensions.has('fsResume')).toBe(!codexLike);
      const c = await RawClient.connect(relay.url);
      await c.handshake('relay-fs-cut');
      const file = join(dir, `once-${codexLike}`);
      writeFileSync(file, 'x');
      // Warm up the upstream session (connected, nothing else in flight), then cut the
      // link at the first byte that comes back: the remove's answer.
      await c.request('fs/getMetadata', { path: pathToFileURL(dir).href });
      const cut = new Promise<string>((resolve) => proxy.once('close', (_r, reason) => resolve(reason)));
      proxy.cutAfterBytes(1, { direction: 'down' });
      const reply = await c.call('fs/remove', { path: pathToFileURL(file).href, recursive: false, force: false });
      expect(await cut).toBe('quota');
      expect(existsSync(file)).toBe(false); // applied...
      if (codexLike) {
        // ...and not re-sent (that would be ENOENT): the relay says it cannot know.
        expect(reply.error?.code).toBe(ErrorCode.InternalError);
        expect(reply.error?.message).toMatch(/outcome unknown/);
      } else {
        expect(reply).toMatchObject({ result: {} }); // ...once, and answered from the upstream's memory
      }
      // The session goes on through the relay.
      expect(await c.request('fs/getMetadata', { path: pathToFileURL(dir).href })).toMatchObject({ isDirectory: true });
      await c.close();
    }
  });

  it('an upstream session that expired becomes an unknown session and unknown processes downstream, never a hang', async () => {
    const shortLived = await startServer({ port: 0, sessionTtlMs: 200 });
    const gate = await ChaosProxy.inFrontOf(shortLived.url);
    const relay = await startRelay({ to: gate.url, upstream: { recoveryDeadlineMs: 30_000 } });
    try {
      const c = await RawClient.connect(relay.url);
      const { sessionId } = await c.handshake('relay-expiry');
      await c.request('process/start', { processId: 'p', argv: ['sleep', '60'], cwd: pathToFileURL(dir).href, env: {}, tty: false });
      const pending = c.call('process/read', { processId: 'p', afterSeq: 0, waitMs: 60_000 });
      // The upstream session is cut off until it expires there.
      const expired = waitFor<string>(shortLived, 'session-expired');
      gate.refuse(true);
      gate.cutAll();
      await expired;
      gate.refuse(false);
      // The relay's resume is refused: its downstream session ends, the connection drops.
      expect((await c.closed).code).toBe(1011);
      const answer = await Promise.race([pending, c.closed.then(() => 'closed')]);
      expect(answer).toBeDefined(); // answered or dropped: not hanging
      const again = await RawClient.connect(relay.url);
      const resume = await again.call('initialize', { clientName: 'relay-expiry', resumeSessionId: sessionId });
      expect(resume.error).toEqual({ code: ErrorCode.InvalidRequest, message: Messages.unknownSession(sessionId) });
      await again.handshake('relay-expiry');
      const read = await again.call('process/read', { processId: 'p', afterSeq: 0 });
      expect(read.error).toEqual({ code: ErrorCode.InvalidRequest, message: Messages.unknownProcess('p') });
      await again.close();
    } finally {
      await relay.close();
      await gate.close();
      await shortLived.close();
    }
  });

  it('holds memory bounded while the upstream is down: a write waits past the 64 KiB handover, past the in-flight cap it is refused; the rest land once when it returns', async () => {
    const relay = await relayTo();
    const c = await RawClient.connect(relay.url);
    await c.handshake('relay-bound');
    await c.request('process/start', { processId: 'cat', argv: ['cat'], cwd: pathToFileURL(dir).href, env: {}, tty: false, pipeStdin: true });
    // The upstream goes away (refused until healed).
    const cut = new Promise<void>((resolve) => proxy.once('close', () => resolve()));
    proxy.refuse(true);
    proxy.cutAll();
    await cut;
    const piece = 32 * 1024;
    const count = 400; // 12.5 MiB of input (17 MiB as base64): more than a connection may have in flight
    const pieceOf = (j: number) => Buffer.alloc(piece, 97 + (j % 26));
    const answers: string[] = [];
    const replies = Array.from({ length: count }, (_, j) => {
      const reply = c.call('process/write', { processId: 'cat', chunk: pieceOf(j).toString('base64'), writeId: `w${j}` });
      void reply.then((f) => answers.push(f.error ? 'refused' : 'accepted'));
      return reply;
    });
    // The last one is past the server's in-flight cap: refused at once, a clear error. By its
    // answer the relay has read every request.
    const last = await replies[count - 1]!;
    expect(last.error?.message).toMatch(/too many bytes of requests in flight/);
    // Only what the handover took was answered; the rest waits, within the cap (16 MiB).
    expect(answers.filter((a) => a === 'accepted').length).toBeLessThanOrEqual(2);
    expect(serverInternals(relay.server).memory.used).toBeLessThan(17 * 1024 * 1024 + 2 * piece);
    proxy.refuse(false); // the upstream returns: tether's client resumes, the writes flow
    const frames = await Promise.all(replies);
    const accepted = frames.map((f, j) => (f.error ? -1 : j)).filter((j) => j >= 0);
    expect(accepted.length).toBeGreaterThan(count / 2);
    expect(accepted).toEqual(Array.from({ length: accepted.length }, (_, j) => j)); // a prefix, in order
    const expected = Buffer.concat(accepted.map(pieceOf));
    await c.waitFor(() => c.outputBuffer('cat').length >= expected.length, 30_000, true);
    expect(c.outputBuffer('cat').equals(expected)).toBe(true); // each accepted write once, in order
    await c.request('process/terminate', { processId: 'cat' });
    await c.close();
  });

  it('closeOnDetach (stdio): the downstream connection ending closes the upstream session at once', async () => {
    const relay = await startRelay({ to: upstream.url, closeOnDetach: true });
    relays.push(relay);
    const c = await RawClient.connect(relay.url);
    await c.handshake('relay-detach');
    await c.request('process/start', { processId: 'p', argv: ['sleep', '60'], cwd: pathToFileURL(dir).href, env: {}, tty: false });
    expect(relay.backend.openSessions).toBe(1);
    const upstreamIds = [...serverInternals(upstream).sessions.keys()];
    const gone = new Promise<string>((resolve) => upstream.on('session-expired', (id: string) => upstreamIds.includes(id) && resolve(id)));
    await c.drop();
    await gone; // closed upstream (session/close), not left detached for its TTL
    expect(relay.backend.openSessions).toBe(0);
    expect(serverInternals(relay.server).sessions.size).toBe(0);
  });
});
