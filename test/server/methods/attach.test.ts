/**
 * Extension `attach` on the wire (docs/protocol.md, "Detach, attach and watch"): named
 * sessions, a watcher reading a running session's output without acknowledging anything or
 * being able to change it, a slow watcher never pausing the producer (it is told a `gap`),
 * the writer moved with `take` (the old connection is told and keeps watching), another
 * token's session answered exactly as an unknown one, and the admin token.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { Messages } from '../../../src/protocol/index.js';
import { RawClient, b64, type Frame } from '../../helpers/raw-client.js';
import { tetherAfterEach } from '../../helpers/tether-per-test.js';

const servers = tetherAfterEach();
const { pool } = servers;

const cwd = pathToFileURL(process.cwd()).href;
const WRITER_EXT = ['acks', 'sessionList', 'attach'];

interface Opened {
  c: RawClient;
  result: any;
}

/** Connects with `token` and initializes with this `tether` member (the handshake's answer, or its error frame). */
async function open(tether: Record<string, unknown>, token = 'alice', extensions = WRITER_EXT): Promise<Opened> {
  const c = await pool.connect(servers.target.url, { token });
  const frame = await c.call('initialize', { clientName: 'attach-test', tether: { version: 1, extensions, ...tether } });
  if (frame.error) return { c, result: frame };
  c.notify('initialized', {});
  return { c, result: frame.result };
}

/** Acknowledges every output of `c` as it comes (a writer that keeps up). */
function ackAll(c: RawClient): void {
  c.on('notification', (f: Frame) => {
    if (f.method === 'process/output') c.notify('process/ack', { processId: f.params.processId, seq: f.params.seq });
  });
}

/** A watcher reads `processId` from `afterSeq` on until `until` is in what it got (long polls, no timing). */
async function watchUntil(c: RawClient, processId: string, until: string, afterSeq = 0): Promise<{ text: string; afterSeq: number; results: any[] }> {
  let text = '';
  const results: any[] = [];
  while (!text.includes(until)) {
    const r = await c.request('process/read', { processId, afterSeq, waitMs: 10_000 });
    results.push(r);
    for (const chunk of r.chunks) text += Buffer.from(chunk.chunk, 'base64').toString();
    afterSeq = r.nextSeq - 1;
    if (r.closed && !text.includes(until)) throw new Error(`closed before ${JSON.stringify(until)}: ${JSON.stringify(text)}`);
  }
  return { text, afterSeq, results };
}

/** Asks `c` for session/list until `pred` holds for its sessions (the server's side of a close is asynchronous). */
async function listUntil(c: RawClient, pred: (sessions: any[]) => boolean): Promise<void> {
  // Bounded by rounds, not time (the test's own timeout ends it sooner on a stuck server).
  for (let i = 0; i < 100_000; i++) {
    if (pred((await c.request('session/list', {})).sessions)) return;
    await new Promise((resolve) => setImmediate(resolve));
  }
  throw new Error('session/list never showed it');
}

async function startCat(c: RawClient, processId = 'cat'): Promise<void> {
  await c.request('process/start', { processId, argv: ['cat'], cwd, env: {}, tty: false, pipeStdin: true });
}

describe('attach', () => {
  it('a watcher attached by name reads a running cat live while the writer writes; it gets the session and its processes in the answer', async () => {
    await servers.start({ tokens: ['alice'] });
    const writer = await open({ name: 'build' });
    expect(writer.result.tether.name).toBe('build');
    ackAll(writer.c);
    await startCat(writer.c);
    const watcher = await open({ attach: { session: 'build', role: 'watcher' } });
    expect(watcher.result.sessionId).toBe(writer.result.sessionId);
    expect(watcher.result.tether.attached).toMatchObject({ sessionId: writer.result.sessionId, name: 'build', role: 'watcher' });
    expect(watcher.result.tether.attached.processes).toEqual([expect.objectContaining({ processId: 'cat', argv: ['cat'], tty: false, state: 'running', exitCode: null })]);
    await writer.c.request('process/write', { processId: 'cat', chunk: b64('one\n'), writeId: 'w1' });
    const first = await watchUntil(watcher.c, 'cat', 'one\n');
    await writer.c.request('process/write', { processId: 'cat', chunk: b64('two\n'), writeId: 'w2' });
    const second = await watchUntil(watcher.c, 'cat', 'two\n', first.afterSeq);
    expect(first.text + second.text).toBe('one\ntwo\n');
    // The writer got both as notifications too: the watcher took nothing from it.
    await writer.c.waitFor(() => writer.c.output('cat') === 'one\ntwo\n', 10_000, true);
    expect(writer.c.output('cat')).toBe('one\ntwo\n');
    expect((await watcher.c.request('session/watch', {})).processes).toEqual([expect.objectContaining({ processId: 'cat', state: 'running' })]);
    const list = await writer.c.request('session/list', {});
    expect(list.sessions).toEqual([expect.objectContaining({ name: 'build', watchers: 1, attached: true })]);
  });

  it("a watcher's process/write, start, signal, terminate and session/close are refused with the read-only message and change nothing", async () => {
    await servers.start({ tokens: ['alice'] });
    const writer = await open({ name: 'svc' });
    ackAll(writer.c);
    await startCat(writer.c);
    const watcher = await open({ attach: { session: writer.result.sessionId, role: 'watcher' } });
    const refusals: Array<[string, unknown, string]> = [
      ['process/write', { processId: 'cat', chunk: b64('sneaky\n'), writeId: 'x' }, 'write to a process'],
      ['process/start', { processId: 'other', argv: ['true'], cwd, env: {}, tty: false }, 'start processes'],
      ['process/signal', { processId: 'cat', signal: 'SIGKILL' }, 'signal a process'],
      ['process/terminate', { processId: 'cat' }, 'terminate a process'],
      ['session/close', {}, 'close the session'],
      ['process/resize', { processId: 'cat', cols: 100, rows: 40 }, 'resize a terminal'],
      ['fs/readFile', { path: '/etc/hostname' }, 'use the filesystem'],
      ['http/request', { method: 'GET', url: 'http://127.0.0.1:1/' }, 'make http requests'],
    ];
    for (const [method, params, verb] of refusals) {
      const frame = await watcher.c.call(method, params);
      expect(frame.error, method).toEqual({ code: -32600, message: Messages.watcherReadOnly('svc', verb) });
    }
    // Nothing changed: cat still runs, only the writer's bytes reach it, no other process exists.
    await writer.c.request('process/write', { processId: 'cat', chunk: b64('mine\n'), writeId: 'w1' });
    const seen = await watchUntil(watcher.c, 'cat', 'mine\n');
    expect(seen.text).toBe('mine\n');
    expect(seen.results.at(-1).exited).toBe(false);
    const snapshot = await watcher.c.request('session/watch', {});
    expect(snapshot.processes.map((p: any) => [p.processId, p.state])).toEqual([['cat', 'running']]);
  });

  it('a watcher reading slowly never pauses the producer: the writer gets everything, the watcher a gap past the retention and exact chunks after it', async () => {
    await servers.start({ tokens: ['alice'], outputWindowBytes: 64 * 1024, outputRetentionBytes: 16 * 1024 });
    const COUNT = 60_000;
    const expected = Array.from({ length: COUNT }, (_, i) => `${i + 1}\n`).join('');
    const writer = await open({ name: 'flood' });
    ackAll(writer.c);
    // The watcher is there from the start and reads nothing until the producer is done.
    const watcher = await open({ attach: { session: 'flood', role: 'watcher' } });
    // After its output the producer stays alive (cat on its stdin), so the process is kept.
    await writer.c.request('process/start', { processId: 'p', argv: ['sh', '-c', `seq 1 ${COUNT}; echo done; exec cat`], cwd, env: {}, tty: false, pipeStdin: true });
    await writer.c.waitFor((f) => f.method === 'process/output' && Buffer.from(f.params.chunk, 'base64').toString().endsWith('done\n'), 60_000, true);
    expect(writer.c.output('p')).toBe(`${expected}done\n`);
    const first = await watcher.c.request('process/read', { processId: 'p', afterSeq: 0 });
    expect(first.gap).toBeDefined();
    expect(first.gap.firstSeq).toBe(1);
    expect(first.chunks[0].seq).toBe(first.gap.lastSeq + 1);
    let got = first.chunks.map((c: any) => Buffer.from(c.chunk, 'base64').toString()).join('');
    if (!got.endsWith('done\n')) got += (await watchUntil(watcher.c, 'p', 'done\n', first.nextSeq - 1)).text;
    expect(got.length).toBeLessThan(expected.length);
    expect(`${expected}done\n`.endsWith(got)).toBe(true);
    // Nothing was acknowledged for the writer by the watcher's reads: its ackedSeq is its own.
    const snapshot = await watcher.c.request('session/watch', {});
    expect(snapshot.processes[0].state).toBe('running');
  });

  it('take moves the writer: the old connection is told session/writer, keeps reading as a watcher, and can no longer write', async () => {
    await servers.start({ tokens: ['alice'] });
    const old = await open({ name: 'job' });
    ackAll(old.c);
    await startCat(old.c);
    const refused = await open({ attach: { session: 'job', role: 'writer' } });
    expect(refused.result.error).toEqual({ code: -32010, message: Messages.writerAttached('job') });
    const taker = await open({ attach: { session: 'job', role: 'writer', take: true } });
    expect(taker.result.tether.attached).toMatchObject({ sessionId: old.result.sessionId, role: 'writer', name: 'job' });
    const told = await old.c.waitFor((f) => f.method === 'session/writer', 10_000, true);
    expect(told.params).toEqual({ writer: false, reason: 'taken' });
    ackAll(taker.c);
    const oldWrite = await old.c.call('process/write', { processId: 'cat', chunk: b64('old\n'), writeId: 'o1' });
    expect(oldWrite.error).toEqual({ code: -32600, message: Messages.watcherReadOnly('job', 'write to a process') });
    expect((await taker.c.request('process/write', { processId: 'cat', chunk: b64('new\n'), writeId: 'n1' })).status).toBe('accepted');
    await taker.c.waitFor(() => taker.c.output('cat') === 'new\n', 10_000, true);
    const seen = await watchUntil(old.c, 'cat', 'new\n');
    expect(seen.text).toBe('new\n');
    const list = await taker.c.request('session/list', {});
    expect(list.sessions).toEqual([expect.objectContaining({ name: 'job', attached: true, watchers: 1 })]);
  });

  it("another token's session, by id or by name, gets exactly the answer of an unknown session", async () => {
    await servers.start({ tokens: ['alice', 'bob'] });
    const alice = await open({ name: 'secret' });
    for (const role of ['watcher', 'writer'] as const) {
      for (const session of [alice.result.sessionId as string, 'secret']) {
        const bob = await open({ attach: { session, role, take: true } }, 'bob');
        expect(bob.result.error).toEqual({ code: -32600, message: Messages.unknownSession(session) });
        const nobody = await open({ attach: { session: `${session}x`, role } }, 'bob');
        expect(nobody.result.error).toEqual({ code: -32600, message: Messages.unknownSession(`${session}x`) });
      }
    }
    // The same name is free for another token; a second one for alice is refused.
    expect((await open({ name: 'secret' }, 'bob')).result.tether.name).toBe('secret');
    const again = await open({ name: 'secret' });
    expect(again.result.error).toEqual({ code: -32602, message: Messages.nameInUse('secret') });
    const malformed = await open({ name: 'a b' });
    expect(malformed.result.error.code).toBe(-32602);
    expect(malformed.result.error.message).toContain('tether.name');
  });

  it('the admin token watches any session, and is its writer only with take', async () => {
    await servers.start({ tokens: ['alice'], adminToken: 'root' });
    const alice = await open({ name: 'owned' });
    ackAll(alice.c);
    await startCat(alice.c);
    await alice.c.request('process/write', { processId: 'cat', chunk: b64('hello\n'), writeId: 'w1' });
    const admin = await open({ attach: { session: 'owned', role: 'watcher' } }, 'root');
    expect((await watchUntil(admin.c, 'cat', 'hello\n')).text).toBe('hello\n');
    // Attached or detached, without take it is refused.
    const noTake = await open({ attach: { session: 'owned', role: 'writer' } }, 'root');
    expect(noTake.result.error.code).toBe(-32600);
    expect(noTake.result.error.message).toContain('only with take');
    await alice.c.close();
    await listUntil(admin.c, (sessions) => sessions.some((x) => x.name === 'owned' && !x.attached));
    const stillNoTake = await open({ attach: { session: 'owned', role: 'writer' } }, 'root');
    expect(stillNoTake.result.error).toEqual(noTake.result.error);
    const taker = await open({ attach: { session: 'owned', role: 'writer', take: true } }, 'root');
    expect(taker.result.tether.attached.role).toBe('writer');
  });

  it('watchers count against --max-sessions-per-token and free their slot when they close', async () => {
    await servers.start({ tokens: ['alice'], maxSessionsPerToken: 2 });
    const owner = await open({ name: 'one' });
    const watcher = await open({ attach: { session: 'one', role: 'watcher' } });
    expect(watcher.result.tether.attached.role).toBe('watcher');
    const third = await open({ attach: { session: 'one', role: 'watcher' } });
    expect(third.result.error.message).toContain('--max-sessions-per-token');
    const fourth = await open({});
    expect(fourth.result.error.message).toContain('--max-sessions-per-token');
    await watcher.c.close();
    await listUntil(owner.c, (sessions) => sessions[0].watchers === 0);
    const again = await open({ attach: { session: 'one', role: 'watcher' } });
    expect(again.result.tether.attached.role).toBe('watcher');
  });

  it("in the Codex dialect (no acks) a watcher's reads acknowledge nothing: the writer that comes back still gets what was recorded while it was away", async () => {
    const target = await servers.start({ tokens: ['alice'], resumeGraceMs: 50 });
    const dir = mkdtempSync(join(tmpdir(), 'attach-'));
    try {
      const extensions = ['sessionList', 'attach'];
      const writer = await open({ name: 'codexy' }, 'alice', extensions);
      const go = join(dir, 'go');
      // It prints once the file exists (the child polls; the test only creates the file).
      await writer.c.request('process/start', { processId: 'p', argv: ['sh', '-c', `while [ ! -e ${go} ]; do sleep 0.02; done; echo late; exec cat`], cwd, env: {}, tty: false, pipeStdin: true });
      const watcher = await open({ attach: { session: 'codexy', role: 'watcher' } }, 'alice', extensions);
      await writer.c.close();
      await listUntil(watcher.c, (sessions) => !sessions[0].attached);
      writeFileSync(go, '');
      expect((await watchUntil(watcher.c, 'p', 'late\n')).text).toBe('late\n');
      // Read twice, acknowledged never: the writer's resume gets it as notifications after the grace.
      await watchUntil(watcher.c, 'p', 'late\n');
      const back = await pool.connect(target.url, { token: 'alice' });
      await back.request('initialize', { clientName: 'attach-test', resumeSessionId: writer.result.sessionId, tether: { version: 1, extensions } });
      back.notify('initialized', {});
      await back.waitFor((f) => f.method === 'process/output' && Buffer.from(f.params.chunk, 'base64').toString() === 'late\n', 10_000, true);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('the watchers of a session that ends are told what became of each process (session/ended: its exit code and next seq, so they know what they did not read) and closed (code 1000, "session ended")', async () => {
    await servers.start({ tokens: ['alice'] });
    const writer = await open({ name: 'short', }, 'alice', [...WRITER_EXT, 'sessionClose']);
    const watcher = await open({ attach: { session: 'short', role: 'watcher' } });
    await writer.c.request('process/start', { processId: 'p', argv: ['sh', '-c', 'echo hi; exit 3'], cwd, env: {}, tty: false });
    await writer.c.waitFor((f) => f.method === 'process/closed' && f.params.processId === 'p', 10_000, true);
    await writer.c.request('session/close', {});
    // Output 1, exit 2, close 3: the watcher read nothing, so seqs 1..3 are what it missed.
    const ended = await watcher.c.waitFor((f) => f.method === 'session/ended', 10_000, true);
    expect(ended.params).toEqual({ reason: 'closed', processes: [{ processId: 'p', exitCode: 3, closed: true, nextSeq: 4 }] });
    expect(await watcher.c.closed).toEqual({ code: 1000, reason: 'session ended' });
    const after = await open({ attach: { session: 'short', role: 'watcher' } });
    expect(after.result.error).toEqual({ code: -32600, message: Messages.unknownSession('short') });
  });

  it('leaves one audit line per attach (role, session, name, owner, token, admin) and one per writer moved', async () => {
    const logs: string[] = [];
    await servers.start({ tokens: ['alice'], adminToken: 'root', logger: (level, msg) => logs.push(`${level} ${msg}`) });
    const writer = await open({ name: 'audited' });
    const short = String(writer.result.sessionId).slice(0, 8);
    await open({ attach: { session: 'audited', role: 'watcher' } });
    await open({ attach: { session: 'audited', role: 'writer', take: true } }, 'root');
    const audit = logs.filter((l) => l.includes('audit attach'));
    expect(audit).toEqual([
      expect.stringMatching(new RegExp(`^info audit attach: role=watcher session=${short} name=audited owner=[0-9a-f]{8} token=[0-9a-f]{8} admin=false from=\\S+$`)),
      expect.stringMatching(new RegExp(`^info audit attach: role=writer session=${short} name=audited owner=[0-9a-f]{8} token=[0-9a-f]{8} admin=true from=\\S+$`)),
      expect.stringMatching(new RegExp(`^info audit attach: writer of session ${short} taken by token=[0-9a-f]{8} admin=true from=\\S+$`)),
    ]);
  });

  it('watchers do not keep a session: with its writer gone it expires after its TTL, and they are closed', async () => {
    await servers.start({ tokens: ['alice'], sessionTtlMs: 300 });
    const writer = await open({ name: 'ttl' });
    await startCat(writer.c);
    const watcher = await open({ attach: { session: 'ttl', role: 'watcher' } });
    await writer.c.drop();
    const ended = await watcher.c.waitFor((f) => f.method === 'session/ended', 10_000, true);
    expect(ended.params).toEqual({ reason: 'expired', processes: [{ processId: 'cat', exitCode: null, closed: false, nextSeq: 1 }] });
    expect(await watcher.c.closed).toEqual({ code: 1000, reason: 'session ended' });
  });

  it('refuses with -32602: a name several tokens use (admin: use the id), attach with resumeSessionId, name or attach without the extension', async () => {
    const target = await servers.start({ tokens: ['alice', 'bob'], adminToken: 'root' });
    const alice = await open({ name: 'shared' });
    await open({ name: 'shared' }, 'bob');
    const ambiguous = await open({ attach: { session: 'shared', role: 'watcher' } }, 'root');
    expect(ambiguous.result.error).toEqual({ code: -32602, message: Messages.nameAmbiguous('shared') });
    const byId = await open({ attach: { session: alice.result.sessionId, role: 'watcher' } }, 'root');
    expect(byId.result.tether.attached.sessionId).toBe(alice.result.sessionId);
    // Each token alone finds its own.
    expect((await open({ attach: { session: 'shared', role: 'watcher' } })).result.tether.attached.sessionId).toBe(alice.result.sessionId);
    const c = await pool.connect(target.url, { token: 'alice' });
    const both = await c.call('initialize', { clientName: 'x', resumeSessionId: alice.result.sessionId, tether: { version: 1, extensions: WRITER_EXT, attach: { session: 'shared', role: 'writer' } } });
    expect(both.error?.code).toBe(-32602);
    expect(both.error?.message).toContain('resumeSessionId');
    for (const tether of [{ name: 'plain' }, { attach: { session: 'shared', role: 'watcher' } }]) {
      const without = await open(tether, 'alice', ['acks']);
      expect(without.result.error.code).toBe(-32602);
      expect(without.result.error.message).toContain('attach extension');
    }
  });
});
