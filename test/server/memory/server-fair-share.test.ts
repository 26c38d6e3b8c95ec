/**
 * One client that never acknowledges cannot freeze the others (issue 22, item 6): a hoarder
 * reads its output but acknowledges nothing while its producers fill the memory budget;
 * another client's `echo` is still delivered, because under pressure only the sessions over
 * their fair share pause. The hoarder loses nothing (its producers wait, and finish once it
 * acknowledges), operators see who is held back and why, and SIGTERM still stops the server.
 *
 * The server is a child process with a bounded heap, default options but a small budget.
 */
import { tmpdir } from 'node:os';
import { pathToFileURL } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { RawClientPool, type Frame } from '../../helpers/raw-client.js';
import { spawnServe, type ServeProcess } from '../../helpers/serve-process.js';

const CWD = pathToFileURL(tmpdir()).href;
const ENV = { PATH: process.env.PATH ?? '/usr/bin:/bin' };
const MiB = 1024 * 1024;

let served: ServeProcess | undefined;
const pool = new RawClientPool();
afterEach(async () => {
  await pool.dropAll();
  await served?.stop();
  served = undefined;
});

/** `/metrics` as text (loopback, no token). */
async function metrics(url: string): Promise<string> {
  const res = await fetch(`${url.replace(/^ws/, 'http')}/metrics`);
  return res.text();
}

/** One sample of `/metrics` (0 when absent). */
function sample(text: string, name: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line ? Number(line.slice(name.length + 1)) : 0;
}

describe('fair shares of the memory budget', () => {
  it("delivers another client's echo while a client that never acknowledges holds the budget past its pause mark, and loses none of the hoarder's output", async () => {
    // 16 MiB budget (pause mark 14.4 MiB); four producers of 12 MiB each, each below its
    // 8 MiB window only at first: together they press the budget long before they finish.
    served = await spawnServe(['--listen', 'ws://127.0.0.1:0', '--memory-budget', '16MiB'], {
      env: { NODE_OPTIONS: '--max-old-space-size=512' },
    });
    const url = served.url;
    const producers = ['p1', 'p2', 'p3', 'p4'];
    const eachBytes = 12 * MiB;

    // The hoarder: reads every frame, acknowledges nothing.
    const hoarder = await pool.connect(url);
    const hoarderSession = await hoarder.request('initialize', { clientName: 'hoarder', tether: { version: 1, extensions: ['acks', 'sessionList'] } });
    hoarder.notify('initialized', {});
    for (const id of producers) {
      const r = await hoarder.call('process/start', { processId: id, argv: ['head', '-c', String(eachBytes), '/dev/zero'], cwd: CWD, env: ENV, tty: false });
      expect(r.error, id).toBeUndefined();
    }
    // Ordered by what the server reports, not by a clock: scrape until it says it is pressed
    // (each scrape waits for its answer; bounded).
    let text = '';
    for (let i = 0; i < 2000 && sample(text, 'tether_memory_pressured') !== 1; i++) text = await metrics(url);
    expect(sample(text, 'tether_memory_pressured')).toBe(1);

    // A newcomer's echo: its output and its close arrive although the hoarder holds the budget.
    const newcomer = await pool.connect(url);
    await newcomer.handshake('newcomer');
    expect((await newcomer.call('process/start', { processId: 'echo', argv: ['echo', 'hi'], cwd: CWD, env: ENV, tty: false })).error).toBeUndefined();
    await newcomer.waitClosed('echo', 20_000);
    expect(newcomer.output('echo')).toBe('hi\n');

    // Still pressed by the hoarder, whose producers live on, paused: operators see who and why.
    const listed = await hoarder.request('session/list', {});
    const mine = listed.sessions.find((s: { current: boolean }) => s.current);
    expect(mine.budgetHold).toMatch(/^paused: over fair share \(\d+(\.\d)?MiB of \d+(\.\d)?MiB\)$/);
    expect(mine.processes.map((p: { state: string }) => p.state)).toEqual(['running', 'running', 'running', 'running']);
    text = await metrics(url);
    expect(sample(text, 'tether_memory_pressured')).toBe(1);
    expect(sample(text, 'tether_output_paused_sessions{reason="over_fair_share"}')).toBe(1);
    expect(sample(text, 'tether_output_session_pauses_total{reason="over_fair_share"}')).toBeGreaterThanOrEqual(1);
    expect(text).not.toMatch(new RegExp(hoarderSession.sessionId.slice(0, 8))); // no session ids as labels

    // The hoarder acknowledges at last: every byte of every producer arrives, once.
    const ack = (f: Frame) => {
      if (f.method === 'process/output' || f.method === 'process/closed') hoarder.notify('process/ack', { processId: f.params.processId, seq: f.params.seq });
    };
    for (const f of hoarder.notifications) ack(f);
    hoarder.on('notification', ack);
    for (const id of producers) await hoarder.waitClosed(id, 60_000);
    for (const id of producers) expect(hoarder.outputBuffer(id).length, id).toBe(eachBytes);

    // SIGTERM (not the helper's SIGKILL after 5 s) stops it.
    await Promise.all([hoarder.close(), newcomer.close()]);
    await served.stop();
    expect(served.child.signalCode === 'SIGKILL').toBe(false);
    expect(served.stderr()).not.toMatch(/heap out of memory|FATAL/i);
  }, 120_000);

  it('a long-detached session whose producers filled their windows never pauses a live one: the live session streams to the end (issue #27)', async () => {
    // 16 MiB budget (pause mark 14.4 MiB), sessions kept detached for an hour (a laptop asleep).
    served = await spawnServe(['--listen', 'ws://127.0.0.1:0', '--memory-budget', '16MiB', '--session-ttl', '1h'], {
      env: { NODE_OPTIONS: '--max-old-space-size=512' },
    });
    const url = served.url;
    // The sleeper: two producers, then its link goes away before it acknowledges anything.
    const sleeper = await pool.connect(url);
    await sleeper.request('initialize', { clientName: 'sleeper', tether: { version: 1, extensions: ['acks', 'sessionList'] } });
    sleeper.notify('initialized', {});
    for (const id of ['s1', 's2']) {
      const r = await sleeper.call('process/start', { processId: id, argv: ['head', '-c', String(12 * MiB), '/dev/zero'], cwd: CWD, env: ENV, tty: false });
      expect(r.error, id).toBeUndefined();
    }
    await sleeper.drop();
    let text = '';
    for (let i = 0; i < 2000 && sample(text, 'tether_memory_pressured') !== 1; i++) text = await metrics(url);
    expect(sample(text, 'tether_memory_pressured')).toBe(1); // what the sleeper holds presses the budget

    // A live session streams more than the whole budget, acknowledging as it reads.
    const live = await pool.connect(url);
    await live.request('initialize', { clientName: 'live', tether: { version: 1, extensions: ['acks', 'sessionList'] } });
    live.notify('initialized', {});
    live.on('notification', (f: Frame) => {
      if ((f.method === 'process/output' || f.method === 'process/closed') && f.params.processId === 'big') live.notify('process/ack', { processId: 'big', seq: f.params.seq });
    });
    const liveBytes = 24 * MiB;
    expect((await live.call('process/start', { processId: 'big', argv: ['head', '-c', String(liveBytes), '/dev/zero'], cwd: CWD, env: ENV, tty: false })).error).toBeUndefined();
    await live.waitClosed('big', 60_000);
    expect(live.outputBuffer('big').length).toBe(liveBytes);

    // Meanwhile the sleeper is the one held back, detached, its producers alive and waiting.
    const listed = await live.request('session/list', {});
    const sleeping = listed.sessions.find((s: { clientName: string }) => s.clientName === 'sleeper');
    expect(sleeping.attached).toBe(false);
    expect(sleeping.budgetHold).toMatch(/^paused: over fair share/);
    expect(sleeping.processes.map((p: { state: string }) => p.state)).toEqual(['running', 'running']);
    await live.close();
  }, 120_000);

  it('refuses a token its next session past --max-sessions-per-token, saying so, and counts it', async () => {
    served = await spawnServe(['--listen', 'ws://127.0.0.1:0', '--max-sessions-per-token', '2'], {
      env: { NODE_OPTIONS: '--max-old-space-size=512' },
    });
    const a = await pool.connect(served.url);
    const b = await pool.connect(served.url);
    const c = await pool.connect(served.url);
    await a.request('initialize', { clientName: 'a', tether: { version: 1, extensions: ['sessionClose'] } });
    a.notify('initialized', {});
    await b.handshake('b');
    const refused = await c.call('initialize', { clientName: 'c' });
    expect(refused.error).toEqual({
      code: -32600,
      message: 'too many sessions for this token: it may have at most 2 at once (--max-sessions-per-token); close or resume one of its sessions instead',
    });
    expect(sample(await metrics(served.url), 'tether_refusals_total{what="session",reason="max_sessions_per_token"}')).toBe(1);
    // Room again once one of its sessions is closed.
    await a.request('session/close', {});
    const d = await pool.connect(served.url);
    expect((await d.call('initialize', { clientName: 'd' })).error).toBeUndefined();
  });
});
