/**
 * The memory budget end to end (issue 13): what clients can make the server hold — requests
 * in flight (a write's data until the child reads it), answers queued on a socket nobody
 * reads, buffered HTTP bodies — is counted in the budget and bounded; with the budget spent,
 * new sessions, processes and large requests are refused with -32603 naming it, while the
 * small calls that give memory back still pass.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { pathToFileURL } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { ErrorCode } from '../../../src/protocol/index.js';
import { RawClient, RawClientPool } from '../../helpers/raw-client.js';
import { startTetherServer, type TetherTarget } from '../../helpers/tether.js';
import { serverInternals } from '../../../src/server/server.js';

const CWD = pathToFileURL(tmpdir()).href;
const ENV = { PATH: process.env.PATH ?? '/usr/bin:/bin' };
const KiB = 1024;
const MiB = 1024 * 1024;

let target: TetherTarget | undefined;
let web: Server | undefined;
const pool = new RawClientPool();
afterEach(async () => {
  await pool.dropAll();
  web?.closeAllConnections();
  await new Promise((resolve) => (web ? web.close(resolve) : resolve(undefined)));
  web = undefined;
  await target?.stop();
  target = undefined;
});

const start = (c: RawClient, processId: string, argv: string[], extra: object = {}) =>
  c.call('process/start', { processId, argv, cwd: CWD, env: ENV, tty: false, ...extra });
const write = (c: RawClient, processId: string, bytes: number, n: number) =>
  c.call('process/write', { processId, chunk: Buffer.alloc(bytes, 48 + (n % 10)).toString('base64'), writeId: `w${n}` });

/** `seq 1 n`'s output, exactly. */
const seqOutput = (n: number) => Buffer.from(`${Array.from({ length: n }, (_, i) => i + 1).join('\n')}\n`);

async function until(cond: () => boolean, what: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('memory budget', () => {
  it('pauses every producer at 90 % of a 4 MiB budget, refuses at 100 % the session that spent it (not a newcomer), and loses no byte', async () => {
    const budget = 4 * MiB;
    target = await startTetherServer({ memoryBudgetBytes: budget });
    const memory = serverInternals(target.server).memory;
    const acks = { version: 1, extensions: ['acks'] };
    // A client starts four producers of ~6.9 MB each (each more than the budget, each
    // below its 8 MiB window), acknowledges nothing, and goes away.
    const lines = 1_000_000;
    const ids = ['p1', 'p2', 'p3', 'p4'];
    let pressuredAt = -1;
    memory.onPressureChange((pressured) => {
      if (pressured && pressuredAt < 0) pressuredAt = memory.used;
    });
    const a = await pool.connect(target.url);
    const { sessionId } = await a.request('initialize', { clientName: 'producer', tether: acks });
    a.notify('initialized', {});
    for (const id of ids) expect((await start(a, id, ['seq', '1', String(lines)])).error).toBeUndefined();
    await a.drop();
    const session = serverInternals(target.server).sessions.get(sessionId)!;
    const procs = ids.map((id) => session.processes.get(id)!);
    await until(() => memory.pressured && procs.every((p) => p.isPaused), 'every producer paused under the budget');
    // Paused because of the budget, not their windows: each keeps much less than 8 MiB, and none finished.
    for (const p of procs) {
      expect(p.closed).toBe(false);
      expect(p.unacknowledged).toBeLessThan(budget);
    }
    // What the processes keep — their unacknowledged output, and the blocks it lives in
    // (util/byte-arena.ts) — is what filled the budget, to within one 256 KiB block (a
    // squeezed history or a spare block may have gone since the pause mark was crossed).
    expect(memory.heldBy('unacked') + memory.heldBy('output')).toBeGreaterThanOrEqual(0.9 * budget - 256 * KiB);
    expect(memory.used).toBeLessThan(budget);
    const readWhilePaused = procs.reduce((n, p) => n + p.bytesRead, 0);

    // Another client fills the rest with a write its child does not read: the budget is spent.
    const c = await pool.connect(target.url);
    await c.handshake();
    expect((await start(c, 'deaf', ['sleep', '60'], { pipeStdin: true })).error).toBeUndefined();
    const pendingWrite = write(c, 'deaf', 512 * KiB, 1);
    await until(() => memory.full, 'the budget is spent');
    // The session whose write spent the budget is refused a process; a newcomer holds nothing
    // and is not (fair shares, issue 22): its session and its process start.
    const budgetText = /^server memory budget exhausted: \d+(\.\d)?MiB held of the 4\.0MiB budget \(--memory-budget\): output clients have not acknowledged /;
    const refused = await start(c, 'one-more', ['true']);
    expect(refused.error).toEqual({ code: ErrorCode.InternalError, message: expect.stringMatching(budgetText) });
    expect(refused.error!.message).toMatch(/no new process until clients read their output or sessions end$/);
    const late = await pool.connect(target.url);
    expect((await late.call('initialize', { clientName: 'late' })).error).toBeUndefined();
    late.notify('initialized', {});
    expect((await start(late, 'late-one', ['true'])).error).toBeUndefined();
    expect(procs.reduce((n, p) => n + p.bytesRead, 0)).toBe(readWhilePaused); // still paused
    expect(await c.request('process/terminate', { processId: 'deaf' })).toEqual({ running: true });
    await pendingWrite;

    // The client comes back (a resume passes with the budget spent), consumes and acknowledges
    // everything: the producers run again and every byte arrives, in order, once.
    const b = await pool.connect(target.url);
    b.on('notification', (f) => {
      if (f.method === 'process/output' || f.method === 'process/closed') b.notify('process/ack', { processId: f.params.processId, seq: f.params.seq });
    });
    expect((await b.call('initialize', { clientName: 'producer', resumeSessionId: sessionId, tether: acks })).error).toBeUndefined();
    b.notify('initialized', {});
    for (const id of ids) await b.waitClosed(id, 60_000);
    const expected = seqOutput(lines);
    for (const id of ids) expect(b.outputBuffer(id).equals(expected), `${id}: every byte once, in order`).toBe(true);
    // Seen from a listener that runs after the processes' own: by then they squeezed what may go
    // (history, spare blocks), so up to a block less than the 90 % that set the pressure.
    expect(pressuredAt).toBeGreaterThanOrEqual(0.9 * budget - 256 * KiB);
    await until(() => memory.heldBy('unacked') === 0 && memory.heldBy('output') === 0, 'the output freed once acknowledged');
    expect(memory.pressured).toBe(false);
    expect((await start(c, 'one-more', ['true'])).error).toBeUndefined();
  }, 90_000);

  it('does not read a process started while the budget is pressured, however fast it writes (none read during its start)', async () => {
    target = await startTetherServer({ memoryBudgetBytes: 4 * MiB });
    const memory = serverInternals(target.server).memory;
    const c = await pool.connect(target.url);
    const { sessionId } = await c.request('initialize', { clientName: 'no-acks', tether: { version: 1, extensions: ['acks'] } });
    c.notify('initialized', {});
    expect((await start(c, 'first', ['yes'])).error).toBeUndefined();
    await until(() => memory.pressured, 'the budget is pressured');
    const session = serverInternals(target.server).sessions.get(sessionId)!;
    const held = memory.used;
    for (let i = 0; i < 20; i++) expect((await start(c, `late${i}`, ['yes'])).error).toBeUndefined();
    await c.request('environment/status', {});
    for (let i = 0; i < 20; i++) expect(session.processes.get(`late${i}`)!.bytesRead, `late${i}`).toBe(0);
    expect(memory.used).toBeLessThan(held + 256 * KiB);
    expect(memory.full).toBe(false);
  });

  it('counts input waiting for a child that does not read it, caps it per connection, and gives it back', async () => {
    target = await startTetherServer({ maxMessageBytes: 2 * MiB });
    const memory = serverInternals(target.server).memory;
    const c = await pool.connect(target.url);
    await c.handshake();
    expect((await start(c, 'deaf', ['sleep', '60'], { pipeStdin: true })).error).toBeUndefined();
    // 512 KiB writes are ~700 KB frames: two fit in the 2 MiB a connection may have in flight.
    const first = write(c, 'deaf', 512 * KiB, 1);
    const second = write(c, 'deaf', 512 * KiB, 2);
    const third = await write(c, 'deaf', 512 * KiB, 3);
    expect(third.error).toEqual({ code: ErrorCode.InvalidRequest, message: expect.stringMatching(/too many bytes of requests in flight on this connection \(at most 2097152/) });
    expect(memory.heldBy('input')).toBeGreaterThan(2 * 512 * KiB);
    expect(memory.heldBy('input')).toBeLessThanOrEqual(2 * MiB);
    // Instant calls always pass: the client can still end it.
    expect(await c.request('process/terminate', { processId: 'deaf' })).toEqual({ running: true });
    await Promise.all([first, second]);
    expect(memory.heldBy('input')).toBe(0);
  });

  it('refuses the session that spent the budget its processes and large requests with -32603 naming the budget; a newcomer and small calls pass; room comes back', async () => {
    target = await startTetherServer({ memoryBudgetBytes: MiB });
    const memory = serverInternals(target.server).memory;
    // A session from before, now detached: resuming it is how a client gets its output back.
    const away = await pool.connect(target.url);
    const { sessionId } = await away.handshake('away');
    await away.drop();
    const c = await pool.connect(target.url);
    await c.handshake();
    expect((await start(c, 'deaf', ['sleep', '60'], { pipeStdin: true })).error).toBeUndefined();
    const writes = [write(c, 'deaf', 512 * KiB, 1), write(c, 'deaf', 512 * KiB, 2)];
    await c.request('environment/status', {}); // both writes were dispatched before it was answered
    expect(memory.full).toBe(true);
    expect(memory.pressured).toBe(true);
    const budgetText = /^server memory budget exhausted: \d+(\.\d)?[KM]iB held of the 1\.0MiB budget \(--memory-budget\): requests and input queued for children/;
    expect((await write(c, 'deaf', 512 * KiB, 3)).error).toEqual({ code: ErrorCode.InternalError, message: expect.stringMatching(budgetText) });
    const refusedStart = await start(c, 'more', ['true']);
    expect(refusedStart.error).toEqual({ code: ErrorCode.InternalError, message: expect.stringMatching(/no new process until clients read their output or sessions end$/) });
    // The session whose input spent the budget is the one refused (it holds more than its
    // share); a newcomer holds nothing and is not (fair shares, issue 22).
    const newcomer = await pool.connect(target.url);
    expect((await newcomer.call('initialize', { clientName: 'late' })).error).toBeUndefined();
    // Small requests pass: a small write (it waits for the child like the others), a read, a resume.
    writes.push(write(c, 'deaf', 100, 4));
    expect((await c.call('process/read', { processId: 'deaf' })).result).toBeDefined();
    const other = await pool.connect(target.url);
    expect((await other.call('initialize', { clientName: 'away', resumeSessionId: sessionId })).result).toMatchObject({ sessionId });
    expect(await c.request('process/terminate', { processId: 'deaf' })).toEqual({ running: true });
    await Promise.all(writes);
    expect(memory.heldBy('input')).toBe(0);
    expect(memory.full).toBe(false);
    expect((await start(c, 'more', ['true'])).error).toBeUndefined();
  });

  it('keeps at most about the high-water mark queued for a client that asks for big reads and never reads its socket', async () => {
    target = await startTetherServer({ outputRetentionBytes: MiB, backpressure: { highWaterBytes: MiB, lowWaterBytes: 256 * KiB } });
    const memory = serverInternals(target.server).memory;
    const c = await pool.connect(target.url);
    await c.handshake();
    await start(c, 'big', ['head', '-c', String(MiB), '/dev/zero']);
    await start(c, 'sleeper', ['sleep', '60']);
    await c.waitClosed('big');
    const sleeperClosed = serverInternals(target.server).sessions.values().next().value!.processes.get('sleeper')!.whenClosed;
    const socket = (c.ws as unknown as { _socket: Socket })._socket;
    socket.pause();
    const reads = Array.from({ length: 60 }, () => c.call('process/read', { processId: 'big', afterSeq: 0 }));
    // Frames are handled in order: once the signal sent after the reads took effect, every read was dispatched.
    c.send({ id: 'sig', method: 'process/signal', params: { processId: 'sleeper', signal: 'terminate' } });
    await sleeperClosed;
    // Without waiting for the buffer to drain this would be 60 answers of 1.4 MB each.
    expect(memory.heldBy('send')).toBeLessThan(MiB + 2 * 1.5 * MiB);
    socket.resume();
    const answers = await Promise.all(reads);
    for (const a of answers) expect(a.result.chunks.reduce((n: number, ch: { chunk: string }) => n + Buffer.from(ch.chunk, 'base64').length, 0)).toBe(MiB);
    await c.drop();
    expect(memory.heldBy('send')).toBe(0);
  });

  it('reserves buffered HTTP bodies in the fs data budget: more than fit at once all arrive, in turn', async () => {
    const body = Buffer.alloc(600 * KiB, 7);
    web = createServer((_req, res) => res.end(body));
    await new Promise<void>((resolve) => web!.listen(0, '127.0.0.1', () => resolve()));
    const url = `http://127.0.0.1:${(web.address() as AddressInfo).port}/`;
    target = await startTetherServer({ fs: { memoryBytes: MiB } });
    const c = await pool.connect(target.url);
    await c.handshake();
    const answers = await Promise.all(
      Array.from({ length: 5 }, (_, i) => c.call('http/request', { method: 'GET', url, requestId: `r${i}` })),
    );
    for (const a of answers) expect(Buffer.from(a.result.bodyBase64, 'base64').equals(body)).toBe(true);
    expect(serverInternals(target.server).memory.heldBy('files')).toBe(0);
  });
});
