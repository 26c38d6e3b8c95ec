/**
 * The library side of detach, attach and watch (src/client: ExecClient.connect `name`,
 * ExecClient.attach, the watcher's read-only handles, 'writer-lost'), against an in-process
 * server: a named session found by name; a watcher whose history was evicted is told the
 * exact gap and gets every event after it; a taken writer is told and its handle goes on
 * delivering output by reads, while its writes are refused; a watcher whose connection is
 * cut is still told of the process its writer started meanwhile ('process'), all its output.
 */
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SessionPoller } from '../../src/client/attach/session-poll.js';
import { ExecClient, type ExecProcess } from '../../src/client/index.js';
import { sequencerOf } from '../../src/client/process/process.js';
import { startServer, type TetherServer } from '../../src/server/index.js';
import { ChaosProxy } from '../../src/chaos/index.js';
import { stdoutSoFar } from '../helpers/client-util.js';

/** A sink that takes a write and holds its callback in `held` until the test calls it: one write, then it stalls. */
function stallingSink(): { sink: Writable; held: (() => void)[]; received: () => string } {
  const held: (() => void)[] = [];
  let received = '';
  const sink = new Writable({
    highWaterMark: 1,
    write(chunk: Buffer, _encoding, callback) {
      received += chunk.toString();
      held.push(() => callback());
    },
  });
  return { sink, held, received: () => received };
}

describe('ExecClient.attach', () => {
  let server: TetherServer;

  beforeAll(async () => {
    // A small history: a watcher from the start finds the oldest acknowledged output gone.
    server = await startServer({ port: 0, outputRetentionBytes: 8192 });
  });

  afterAll(() => server.close());

  it('a name is checked before anything is sent, and the session answers to it', async () => {
    await expect(ExecClient.connect(server.url, { name: 'no spaces' })).rejects.toThrow(/name must be 1 to 64 characters/);
    const owner = await ExecClient.connect(server.url, { name: 'named-1' });
    expect(owner.sessionName).toBe('named-1');
    expect(owner.role).toBeNull();
    const proc = owner.spawn(['sh', '-c', 'echo ready; sleep 30'], { pipeStdin: true });
    const out = stdoutSoFar(proc);
    await expect.poll(out).toBe('ready\n');
    const watcher = await ExecClient.attach(server.url, 'named-1', { role: 'watcher' });
    expect(watcher.sessionId).toBe(owner.sessionId);
    expect(watcher.sessionName).toBe('named-1');
    expect(watcher.processes().map((p) => p.id)).toEqual([proc.id]);
    await watcher.close(); // a watcher's close only leaves
    expect(proc.exitCode).toBeNull();
    await owner.close();
  });

  it('a watcher from the start past the history is told the exact gap once, then gets every event after it, and the exit', async () => {
    const owner = await ExecClient.connect(server.url, { name: 'evicted' });
    // 200 lines of 100 bytes, one output event each (a pause between them), consumed
    // (acknowledged) by the owner: only the newest ~8 KiB stay as history.
    const proc = owner.spawn(['sh', '-c', 'for i in $(seq 1 200); do printf "%099d\\n" $i; sleep 0.005; done; read x; exit 4'], { pipeStdin: true });
    const out = stdoutSoFar(proc);
    await expect.poll(out, { timeout: 30_000 }).toMatch(/0200\n$/);
    const watcher = await ExecClient.attach(server.url, 'evicted', { role: 'watcher', fromStart: true });
    const [seen] = watcher.processes();
    const gaps: { fromSeq: number; toSeq: number }[] = [];
    seen!.on('gap', (g) => gaps.push(g));
    const watched = stdoutSoFar(seen!);
    proc.stdin!.end('\n');
    expect(await seen!.exited).toBe(4);
    await seen!.closed;
    expect(gaps).toHaveLength(1);
    expect(gaps[0]!.fromSeq).toBe(1);
    // Every line after the gap, whole and in order, to the last.
    const lines = watched().split('\n').filter(Boolean).map(Number);
    expect(lines.length).toBeGreaterThan(0);
    expect(lines.length).toBeLessThan(200);
    expect(lines).toEqual(Array.from({ length: lines.length }, (_, i) => 201 - lines.length + i));
    await watcher.close();
    await owner.close();
  });

  it("a taken writer is told ('writer-lost'), its handle goes on with the output, and its writes are refused", async () => {
    const owner = await ExecClient.connect(server.url, { name: 'taken' });
    const cat = owner.spawn(['cat'], { pipeStdin: true });
    const ownerOut = stdoutSoFar(cat);
    await new Promise((resolve) => cat.once('spawn', resolve));
    const lost = new Promise<{ reason: string }>((resolve) => owner.once('writer-lost', resolve));
    await expect(ExecClient.attach(server.url, 'taken', { role: 'writer' })).rejects.toThrow(/session taken has a writer attached: attach with take to move it, or as a watcher/);
    const taker = await ExecClient.attach(server.url, 'taken', { role: 'writer', take: true });
    expect(await lost).toEqual({ reason: 'taken' });
    expect(owner.role).toBe('watcher');
    const [mine] = taker.processes();
    const takerOut = stdoutSoFar(mine!);
    mine!.stdin!.write('from the taker\n');
    await expect.poll(takerOut).toBe('from the taker\n');
    await expect.poll(ownerOut).toBe('from the taker\n');
    await expect(owner.request('process/write', { processId: cat.id, chunk: Buffer.from('x').toString('base64') })).rejects.toThrow(/watches session taken read-only/);
    mine!.stdin!.end();
    expect(await mine!.exited).toBe(0);
    await cat.closed; // the old writer's handle saw the end too
    expect(ownerOut()).toBe('from the taker\n');
    await owner.close();
    await taker.close();
  });

  it('a watcher and an attached writer recover through cut connections: the watcher attaches again and reads on, every line once and in order', async () => {
    const owner = await ExecClient.connect(server.url, { name: 'cut', sessionKeepMs: 60_000 });
    const proc = owner.spawn(['sh', '-c', 'read x; for i in $(seq 1 150); do echo $i; sleep 0.005; done; exit 2'], { pipeStdin: true });
    await new Promise((resolve) => proc.once('spawn', resolve));
    await owner.detach(); // the owner leaves: the session is detached, its process waits for its line
    const proxy = await ChaosProxy.inFrontOf(server.url);
    try {
      const writer = await ExecClient.attach(proxy.url, 'cut', { role: 'writer', recoveryDeadlineMs: 20_000 });
      const watcher = await ExecClient.attach(proxy.url, 'cut', { role: 'watcher', recoveryDeadlineMs: 20_000 });
      const [w] = writer.processes();
      const [v] = watcher.processes();
      const wOut = stdoutSoFar(w!);
      const vOut = stdoutSoFar(v!);
      const recovered = Promise.all([new Promise((r) => writer.once('recovered', r)), new Promise((r) => watcher.once('recovered', r))]);
      w!.stdin!.write('go\n');
      await expect.poll(() => vOut().split('\n').length, { timeout: 20_000 }).toBeGreaterThan(20);
      expect(proxy.cutAll()).toBeGreaterThanOrEqual(2);
      await recovered;
      expect(await w!.exited).toBe(2);
      expect(await v!.exited).toBe(2);
      await Promise.all([w!.closed, v!.closed]);
      const expected = Array.from({ length: 150 }, (_, i) => `${i + 1}\n`).join('');
      expect(wOut()).toBe(expected);
      expect(vOut()).toBe(expected);
      await watcher.close();
      await writer.close();
    } finally {
      await proxy.close();
    }
  });

  it('a watcher reads no further than its sink takes: a stalled sink holds its reads back (not its memory), and it catches up after', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tether-attach-'));
    const go = join(dir, 'go');
    const done = join(dir, 'done');
    const owner = await ExecClient.connect(server.url, { name: 'slow-sink' });
    const proc = owner.spawn(['sh', '-c', `while [ ! -e ${go} ]; do sleep 0.01; done; for i in $(seq 1 200); do printf "%099d\\n" $i; sleep 0.002; done; touch ${done}; exit 6`]);
    await new Promise((resolve) => proc.once('spawn', resolve));
    // The owner leaves without reading: all the output stays unacknowledged, kept for the watcher.
    await owner.detach();
    const expected = Array.from({ length: 200 }, (_, i) => `${String(i + 1).padStart(99, '0')}\n`).join('');
    const { sink, held, received } = stallingSink();
    const watcher = await ExecClient.attach(server.url, 'slow-sink', { role: 'watcher', sinks: () => ({ stdout: sink }) });
    const [v] = watcher.processes();
    const gaps: unknown[] = [];
    v!.on('gap', (g) => gaps.push(g));
    writeFileSync(go, '');
    await expect.poll(() => existsSync(done), { timeout: 30_000 }).toBe(true);
    // The producer is done (20 KB): the stalled sink holds one write, and the watcher took little more.
    expect(held.length).toBe(1);
    expect(received().length + sink.writableLength).toBeLessThan(expected.length / 2);
    expect(v!.exitCode).toBeNull();
    // Let it drain: every line, in order, then the exit.
    const release = setInterval(() => held.splice(0).forEach((cb) => cb()), 5);
    try {
      expect(await v!.exited).toBe(6);
      await expect.poll(() => received().length, { timeout: 20_000 }).toBe(expected.length);
      expect(received()).toBe(expected);
      expect(gaps).toEqual([]);
    } finally {
      clearInterval(release);
      rmSync(dir, { recursive: true, force: true });
    }
    await watcher.close();
  });
  it('a watcher behind when the writer closes the session is told (session/ended): one gap for exactly the output seqs it never read, then the exit status', async () => {
    const owner = await ExecClient.connect(server.url, { name: 'ended-behind' });
    const proc = owner.spawn(['sh', '-c', 'read a; echo first; read b; for i in $(seq 1 200); do printf "%099d\\n" $i; done; exit 6'], { pipeStdin: true });
    const ownOutput = stdoutSoFar(proc);
    await new Promise((resolve) => proc.once('spawn', resolve));
    const { sink, held, received } = stallingSink();
    const watcher = await ExecClient.attach(server.url, 'ended-behind', { role: 'watcher', sinks: () => ({ stdout: sink }) });
    const [v] = watcher.processes();
    const gaps: { fromSeq: number; toSeq: number }[] = [];
    v!.on('gap', (g) => gaps.push(g));
    // The watcher takes the first line into its sink, which stalls: it reads no further.
    proc.stdin!.write('a\n');
    await expect.poll(() => received(), { timeout: 20_000 }).toBe('first\n');
    proc.stdin!.write('b\n');
    expect(await proc.exited).toBe(6);
    await proc.closed;
    const expected = 'first\n' + Array.from({ length: 200 }, (_, i) => `${String(i + 1).padStart(99, '0')}\n`).join('');
    expect(ownOutput()).toBe(expected);
    // The writer is done and ends the session while the watcher's sink still holds its first write.
    expect(held.length).toBeLessThanOrEqual(1);
    await owner.close();
    expect(await v!.exited).toBe(6);
    held.splice(0).forEach((cb) => cb());
    // What it printed is a prefix of the output; the gap is exactly the rest, up to the exit.
    expect(received()).toBe('first\n');
    expect(gaps).toHaveLength(1);
    // The writer's last seq is the close; the exit is the one before it.
    expect(gaps[0]!.toSeq).toBe(sequencerOf(proc).lastDelivered - 2);
    await watcher.close();
  });

  it("a watcher's polling stops when it closes, and when the session ends; a closed process the server forgot leaves processes()", async () => {
    const started: SessionPoller[] = [];
    // Each watcher's poller, caught as it starts.
    const original = SessionPoller.prototype.start;
    SessionPoller.prototype.start = function (this: SessionPoller) {
      started.push(this);
      original.call(this);
    };
    const short = await startServer({ port: 0, closedRetentionMs: 1000 });
    try {
      const owner = await ExecClient.connect(short.url, { name: 'polled' });
      const closer = await ExecClient.attach(short.url, 'polled', { role: 'watcher' });
      const stayer = await ExecClient.attach(short.url, 'polled', { role: 'watcher' });
      const optedOut = await ExecClient.attach(short.url, 'polled', { role: 'watcher', followNew: false });
      const writer = await ExecClient.attach(short.url, 'polled', { role: 'writer', take: true });
      expect(started).toHaveLength(2); // the two watchers that follow new processes; not followNew: false, not a writer
      const [closerPoll, stayerPoll] = started;
      expect(closerPoll!.running && stayerPoll!.running).toBe(true);
      await closer.close();
      expect(closerPoll!.running).toBe(false);
      // A process the writer starts (it waits until the watcher found it: a retention shorter
      // than the polls' interval may forget it before), followed to its close; then the
      // server forgets it (the closed retention) and so does processes().
      const found = new Promise<ExecProcess>((resolve) => stayer.once('process', resolve));
      const proc = writer.spawn(['sh', '-c', 'read x; echo short; exit 1'], { pipeStdin: true });
      const seen = await found;
      expect(seen.id).toBe(proc.id);
      proc.stdin!.end('\n');
      expect(await seen.exited).toBe(1);
      await seen.closed;
      await expect.poll(() => stayer.processes(), { timeout: 20_000 }).toEqual([]);
      // The session ends (its writer closes it): the watcher's polling stops with it.
      await writer.close();
      await expect.poll(() => stayerPoll!.running, { timeout: 20_000 }).toBe(false);
      await Promise.all([stayer.close(), optedOut.close(), owner.close()]);
    } finally {
      SessionPoller.prototype.start = original;
      await short.close();
    }
  });

  it('followNew is checked before anything is sent', async () => {
    await expect(ExecClient.attach(server.url, 'any', { role: 'watcher', followNew: 'yes' as unknown as boolean })).rejects.toThrow(/followNew must be a boolean \(got yes\)/);
  });

  it("a watcher cut off while the writer starts a process is told of it once it is back ('process'): all its output, its exit code", async () => {
    const owner = await ExecClient.connect(server.url, { name: 'new-after-cut' });
    const proxy = await ChaosProxy.inFrontOf(server.url);
    try {
      const watcher = await ExecClient.attach(proxy.url, 'new-after-cut', { role: 'watcher', recoveryDeadlineMs: 20_000 });
      expect(watcher.processes()).toEqual([]);
      const recovered = new Promise((r) => watcher.once('recovered', r));
      const found = new Promise<ExecProcess>((resolve) => watcher.once('process', resolve));
      expect(proxy.cutAll()).toBeGreaterThanOrEqual(1);
      // Started while the watcher is away; it prints once the watcher is back (a process whose
      // output was all acknowledged while no watcher was linked keeps none of it as history).
      const proc = owner.spawn(['sh', '-c', 'read x; for i in 1 2 3; do echo line $i; done; exit 6'], { pipeStdin: true });
      await recovered;
      const seen = await found;
      proc.stdin!.end('go\n');
      expect(await proc.exited).toBe(6);
      expect(seen.id).toBe(proc.id);
      const out = stdoutSoFar(seen);
      expect(await seen.exited).toBe(6);
      await seen.closed;
      expect(out()).toBe('line 1\nline 2\nline 3\n');
      expect(watcher.processes()).toEqual([seen]);
      await watcher.close();
    } finally {
      await proxy.close();
      await owner.close();
    }
  });
});
