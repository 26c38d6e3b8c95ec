/**
 * The client's reconnect engine on its own (src/client/engine.ts), with fake timers, an
 * injected clock and injected randomness: generations, waiters, the recovery loop and its
 * backoff, the deadline, fatal failures, and one error for everyone at the end.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ReconnectEngine, type EngineConnection, type StateChange } from '../../../src/client/engine.js';
import { RUNNING_TICK_MS } from '../../../src/client/running-clock.js';
import { ServerStoppedError, SessionLostError } from '../../../src/client/errors.js';
import { parseCloseNotice, restartingReason, SERVER_STOPPED_REASON, stopClose } from '../../../src/protocol/close-reasons.js';

class FakeConnection implements EngineConnection {
  isOpen = true;
  destroyedWith: Error | null = null;
  closed = false;
  constructor(readonly generation: number) {}
  destroy(reason: Error): void {
    this.isOpen = false;
    this.destroyedWith = reason;
  }
  close(): void {
    this.isOpen = false;
    this.closed = true;
  }
}

type Outcome = { ok: true } | { ok: false; error: Error } | { hang: true };

/** An engine whose attempts follow a script; records when each attempt started. */
function setup(script: Outcome[], opts: { deadlineMs?: number; random?: () => number; delayMs?: (attempt: number) => number } = {}) {
  let generation = 1;
  const attempts: { at: number; attempt: number; remaining: number }[] = [];
  const states: StateChange[] = [];
  const engine = new ReconnectEngine<FakeConnection>({
    recoveryDeadlineMs: opts.deadlineMs ?? 10_000,
    now: () => Date.now(),
    random: opts.random ?? (() => 0.5),
    delayMs: opts.delayMs,
    sessionId: () => 'session-0123456789',
    fatal: (err) => ((err as Error).message === 'auth' ? 'auth' : (err as Error).message === 'gone' ? 'expired' : undefined),
    resume: (attempt, remaining, signal) => {
      attempts.push({ at: Date.now(), attempt, remaining });
      const outcome = script.shift() ?? { ok: false, error: new Error('refused') };
      if ('hang' in outcome) return new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason)));
      if (!outcome.ok) return Promise.reject(outcome.error);
      return Promise.resolve(new FakeConnection(++generation));
    },
  });
  engine.on('state', (s) => states.push(s));
  const first = new FakeConnection(1);
  engine.start(first);
  return { engine, first, attempts, states };
}

beforeEach(() => {
  vi.useFakeTimers({ now: 1_000_000 });
});
afterEach(() => {
  vi.useRealTimers();
});

describe('ReconnectEngine', () => {
  it('starts connected without events and hands out the connection', async () => {
    const { engine, first, states } = setup([]);
    expect(engine.state).toBe('connected');
    expect(engine.generation).toBe(1);
    await expect(engine.ready()).resolves.toBe(first);
    expect(states).toEqual([]);
  });

  it('recovers at once on the first attempt; waiters get the new connection', async () => {
    const { engine, first, attempts, states } = setup([{ ok: true }]);
    const recovered = vi.fn();
    engine.on('recovered', recovered);
    engine.lost(first, new Error('reset'));
    expect(engine.state).toBe('recovering');
    const waiting = engine.ready();
    await vi.advanceTimersByTimeAsync(0);
    const next = await waiting;
    expect(next.generation).toBe(2);
    expect(attempts.map((a) => a.at - 1_000_000)).toEqual([0]); // no wait before the first attempt
    expect(states.map((s) => [s.previous, s.state, s.attempt])).toEqual([
      ['connected', 'recovering', 1],
      ['recovering', 'connected', 1],
    ]);
    expect(recovered).toHaveBeenCalledWith(expect.objectContaining({ generation: 2, attempts: 1, reason: 'reset' }));
  });

  it('backs off with jitter between attempts: 0, then 75, 150, 300 ms with random 0.5', async () => {
    const { engine, first, attempts } = setup([
      { ok: false, error: new Error('refused') },
      { ok: false, error: new Error('refused') },
      { ok: false, error: new Error('refused') },
      { ok: true },
    ]);
    const retries: number[] = [];
    engine.on('retry', (r) => retries.push(r.attempt));
    engine.lost(first, new Error('reset'));
    await vi.advanceTimersByTimeAsync(1000);
    expect(engine.state).toBe('connected');
    const t0 = 1_000_000;
    expect(attempts.map((a) => a.at - t0)).toEqual([0, 75, 225, 525]);
    expect(retries).toEqual([1, 2, 3]);
  });

  it('ignores a late close of an old generation, and of a connection that is not current', async () => {
    const { engine, first, attempts } = setup([{ ok: true }]);
    engine.lost(first, new Error('reset'));
    await vi.advanceTimersByTimeAsync(0);
    engine.lost(first, new Error('late close of generation 1'));
    engine.lost(new FakeConnection(99), new Error('stranger'));
    expect(engine.state).toBe('connected');
    expect(attempts).toHaveLength(1);
  });

  it('fails at the deadline with one SessionLostError for every waiter, naming the last cause', async () => {
    const { engine, first, states } = setup([], { deadlineMs: 2_000 });
    engine.lost(first, new Error('reset'));
    const waiters = [engine.ready(), engine.ready()];
    for (const w of waiters) w.catch(() => {});
    await vi.advanceTimersByTimeAsync(2_000);
    expect(engine.state).toBe('failed');
    const errors = await Promise.all(waiters.map((w) => w.then(() => null, (e: unknown) => e)));
    expect(errors[0]).toBeInstanceOf(SessionLostError);
    expect(errors[0]).toBe(errors[1]);
    expect((errors[0] as SessionLostError).reason).toBe('deadline');
    expect((errors[0] as Error).message).toMatch(/refused/);
    expect((errors[0] as Error).message).not.toContain('0123456789'); // the session id is shortened
    expect(states.at(-1)).toMatchObject({ state: 'failed', previous: 'recovering' });
    await expect(engine.ready()).rejects.toBe(errors[0]);
  });

  it('aborts an attempt that hangs past the deadline', async () => {
    const { engine, first, attempts } = setup([{ hang: true }], { deadlineMs: 3_000 });
    engine.lost(first, new Error('reset'));
    await vi.advanceTimersByTimeAsync(3_001);
    expect(attempts).toHaveLength(1);
    expect(attempts[0]!.remaining).toBe(3_000);
    expect(engine.state).toBe('failed');
    expect(engine.failure?.reason).toBe('deadline');
  });

  it('fails at once on a fatal answer (auth refused, session gone)', async () => {
    for (const [message, reason] of [
      ['auth', 'auth'],
      ['gone', 'expired'],
    ] as const) {
      const { engine, first, attempts } = setup([{ ok: false, error: new Error(message) }]);
      engine.lost(first, new Error('reset'));
      await vi.advanceTimersByTimeAsync(0);
      expect(engine.failure?.reason).toBe(reason);
      expect(attempts).toHaveLength(1);
    }
  });

  it('stops recovering when failed from outside (closed), and closes a connection that arrives too late', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const late = new FakeConnection(7);
    const engine = new ReconnectEngine<FakeConnection>({
      recoveryDeadlineMs: 10_000,
      now: () => Date.now(),
      sessionId: () => 's',
      fatal: () => undefined,
      resume: async () => {
        await gate;
        return late;
      },
    });
    const first = new FakeConnection(1);
    engine.start(first);
    engine.lost(first, new Error('reset'));
    await vi.advanceTimersByTimeAsync(0);
    engine.fail('closed');
    release();
    await vi.advanceTimersByTimeAsync(0);
    expect(engine.state).toBe('closed'); // a close by the owner is not a failure
    expect(late.closed).toBe(true);
    expect(first.destroyedWith).toBeNull(); // closing is orderly: the owner closes its socket itself
  });

  it("a close by the owner ends in state 'closed' with no reason: not a failure; later callers get SessionLostError('closed')", async () => {
    const { engine, states } = setup([]);
    engine.fail('closed');
    expect(engine.state).toBe('closed');
    expect(states).toEqual([{ state: 'closed', previous: 'connected', generation: 1, attempt: 0, reason: undefined, error: undefined }]);
    const error = await engine.ready().then(() => null, (e: unknown) => e);
    expect(error).toBeInstanceOf(SessionLostError);
    expect((error as SessionLostError).reason).toBe('closed');
    engine.fail('expired'); // ended: nothing changes
    expect(engine.state).toBe('closed');
    expect(states).toHaveLength(1);
  });

  it('a failure cuts a backoff sleep short', async () => {
    const { engine, first, attempts } = setup([{ ok: false, error: new Error('refused') }]);
    engine.lost(first, new Error('reset'));
    await vi.advanceTimersByTimeAsync(10); // first attempt failed; sleeping 75 ms
    engine.fail('closed');
    await vi.advanceTimersByTimeAsync(1000);
    expect(attempts).toHaveLength(1);
  });

  // What the server said as it closed (issue #27). The plain backoff is made 60 s for every
  // attempt, the first too, so only the restart schedule can reconnect within a second.
  const sixtySeconds = () => 60_000;

  it("a 'stopped' notice fails at once with ServerStoppedError: no attempt, no waiting", async () => {
    const { engine, first, attempts, states } = setup([{ ok: true }]);
    engine.lost(first, new Error('connection lost'), { kind: 'stopped' });
    expect(engine.state).toBe('failed');
    const waiting = engine.ready();
    const error = await waiting.then(() => null, (e: unknown) => e);
    expect(error).toBeInstanceOf(ServerStoppedError);
    expect(error).toBeInstanceOf(SessionLostError);
    expect((error as SessionLostError).reason).toBe('stopped');
    expect((error as Error).message).toMatch(/server stopped/);
    await vi.advanceTimersByTimeAsync(60_000);
    expect(attempts).toEqual([]);
    expect(states.map((s) => [s.previous, s.state])).toEqual([['connected', 'failed']]);
  });

  it("a 'restarting' notice reconnects at once, then on short waits, within the same deadline", async () => {
    const { engine, first, attempts, states } = setup(
      [{ ok: false, error: new Error('refused') }, { ok: false, error: new Error('refused') }, { ok: true }],
      { delayMs: sixtySeconds },
    );
    const restarting = vi.fn();
    engine.on('restarting', restarting);
    engine.lost(first, new Error('connection closed (1012)'), { kind: 'restarting', keptMs: 30_000 });
    expect(restarting).toHaveBeenCalledWith({ generation: 1, keptMs: 30_000 });
    await vi.advanceTimersByTimeAsync(1_000);
    expect(engine.state).toBe('connected');
    expect(attempts.map((a) => a.at - 1_000_000)).toEqual([0, 75, 188]); // 0, then 75 and 113 ms (random 0.5)
    expect(attempts[0]!.remaining).toBe(10_000); // the recovery deadline, as for any drop
    expect(states.map((s) => [s.previous, s.state])).toEqual([
      ['connected', 'recovering'],
      ['recovering', 'connected'],
    ]);
  });

  it('the same drop without a notice waits out the plain backoff (the control of the test above)', async () => {
    const { engine, first, attempts } = setup([{ ok: true }], { delayMs: sixtySeconds });
    engine.lost(first, new Error('connection closed (1006)'));
    await vi.advanceTimersByTimeAsync(1_000);
    expect(attempts).toEqual([]);
    expect(engine.state).toBe('recovering');
  });

  it("a 'restarting' server that never comes back still fails at the recovery deadline", async () => {
    const { engine, first, attempts } = setup([], { deadlineMs: 2_000, delayMs: sixtySeconds });
    engine.lost(first, new Error('connection closed (1012)'), { kind: 'restarting', keptMs: 30_000 });
    await vi.advanceTimersByTimeAsync(2_000);
    expect(engine.state).toBe('failed');
    expect(engine.failure?.reason).toBe('deadline');
    expect(attempts.length).toBeGreaterThan(4);
  });

  describe('the deadline counts running time (a stop or a sleep of the client does not use it up)', () => {
    /** The process stopped: the clock jumps, no timer fires meanwhile. */
    const suspend = (ms: number) => vi.setSystemTime(Date.now() + ms);

    it('a stop of 60 s against a 10 s deadline, mid-recovery: on waking the engine goes on and recovers', async () => {
      const { engine, first, attempts } = setup([{ ok: false, error: new Error('refused') }, { ok: true }]);
      const lostAt = Date.now();
      engine.lost(first, new Error('reset'));
      await vi.advanceTimersByTimeAsync(0);
      expect(attempts).toHaveLength(1);
      suspend(60_000);
      await vi.advanceTimersByTimeAsync(1_000);
      expect(engine.state).toBe('connected');
      expect(attempts).toHaveLength(2);
      expect(attempts[1]!.at - lostAt).toBeGreaterThan(60_000);
      expect(attempts[1]!.remaining).toBeGreaterThan(10_000 - 1_000); // the stop took at most one tick
    });

    it('fails once the running time passes the deadline, not the wall time', async () => {
      const { engine, first } = setup([], { deadlineMs: 10_000 });
      const lostAt = Date.now();
      let failedAt: number | undefined;
      engine.on('state', (s) => {
        if (s.state === 'failed') failedAt = Date.now();
      });
      engine.lost(first, new Error('reset'));
      await vi.advanceTimersByTimeAsync(3_000);
      suspend(60_000);
      for (let i = 0; i < 200 && failedAt === undefined; i++) await vi.advanceTimersByTimeAsync(100);
      expect(engine.failure?.reason).toBe('deadline');
      // 10 s of running time: 3 s, the stop (one tick at most), the 7 s left.
      expect(failedAt! - lostAt).toBeGreaterThanOrEqual(60_000 + 10_000 - RUNNING_TICK_MS);
      expect(failedAt! - lostAt).toBeLessThanOrEqual(60_000 + 10_000 + 100);
    });
  });
});

describe('close notices (protocol/close-reasons.ts)', () => {
  it("reads tether's stopped and restarting closes", () => {
    expect(parseCloseNotice(1001, SERVER_STOPPED_REASON)).toEqual({ kind: 'stopped' });
    expect(parseCloseNotice(1012, restartingReason(30_000))).toEqual({ kind: 'restarting', keptMs: 30_000 });
    const stop = stopClose(null);
    expect(parseCloseNotice(stop.code, stop.reason)).toEqual({ kind: 'stopped' });
    const restart = stopClose({ keptMs: 45_000 });
    expect(restart.code).toBe(1012);
    expect(parseCloseNotice(restart.code, restart.reason)).toEqual({ kind: 'restarting', keptMs: 45_000 });
    expect(Buffer.byteLength(restart.reason)).toBeLessThanOrEqual(123); // a close frame's reason limit
  });

  it("takes any other close for a plain drop: a proxy's 1001, a bare 1012, tether's text under another code", () => {
    expect(parseCloseNotice(1001, '')).toBeNull();
    expect(parseCloseNotice(1001, 'proxy going away')).toBeNull();
    expect(parseCloseNotice(1012, '')).toBeNull();
    expect(parseCloseNotice(1012, 'server restarting')).toBeNull();
    expect(parseCloseNotice(1000, SERVER_STOPPED_REASON)).toBeNull();
    expect(parseCloseNotice(1001, restartingReason(30_000))).toBeNull();
    expect(parseCloseNotice(1012, SERVER_STOPPED_REASON)).toBeNull();
    expect(parseCloseNotice(1006, '')).toBeNull();
  });
});
