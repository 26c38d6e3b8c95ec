// The supervisor's retry policy alone (src/supervisor/policy.ts) and its attempt scheduler (attempt-scheduler.ts):
// plain values, an injected clock and random source, fake timers; no servers.
import { describe, expect, it, vi } from 'vitest';
import { AttemptScheduler } from '../../../src/supervisor/attempt-scheduler.js';
import { FailureRecord } from '../../../src/supervisor/failure-record.js';
import { LinkWatch } from '../../../src/supervisor/tether-link.js';
import { RetryPolicy, type RetryPolicyOptions } from '../../../src/supervisor/policy.js';
import { DEFAULT_BACKOFF } from '../../../src/util/backoff.js';

function policy(over: Partial<RetryPolicyOptions> = {}, random = () => 0.5) {
  let now = 1_000_000;
  const clock = { advance: (ms: number) => (now += ms) };
  const p = new RetryPolicy({ backoff: DEFAULT_BACKOFF, crashLimit: 3, crashWindowMs: 60_000, ...over }, random, () => now);
  return { p, clock };
}

describe('RetryPolicy', () => {
  it('a loss schedules exponential backoff by streak, jitter from the injected random', () => {
    const { p } = policy();
    expect([1, 2, 3, 4].map(() => p.onFailure('loss', 'x'))).toEqual([1000, 2000, 4000, 8000].map((delayMs) => ({ action: 'schedule', delayMs })));
    expect(p.streakFailures).toBe(4);
    expect(p.retryCount).toBe(3);
    const low = policy({}, () => 0).p;
    expect(low.onFailure('loss', 'x')).toEqual({ action: 'schedule', delayMs: 900 });
  });

  it('a new streak starts the backoff over', () => {
    const { p } = policy();
    p.onFailure('loss', 'x');
    p.onFailure('loss', 'x');
    p.newStreak();
    expect(p.onFailure('loss', 'x')).toEqual({ action: 'schedule', delayMs: 1000 });
  });

  it('maxRetries: gives up after that many retries of a streak, saying why', () => {
    const { p } = policy({ maxRetries: 2 });
    expect(p.onFailure('loss', 'e1').action).toBe('schedule');
    expect(p.onFailure('loss', 'e2').action).toBe('schedule');
    expect(p.onFailure('loss', 'e3')).toEqual({ action: 'stop', status: 'failed', reason: 'gave up after 2 retries: e3' });
    const one = policy({ maxRetries: 1 }).p;
    one.onFailure('loss', 'a');
    expect(one.onFailure('loss', 'b')).toEqual({ action: 'stop', status: 'failed', reason: 'gave up after 1 retry: b' });
  });

  it('auth stops at once with requires_reauth', () => {
    const { p } = policy();
    expect(p.onFailure('auth', 'HTTP 401')).toEqual({ action: 'stop', status: 'requires_reauth', reason: 'authorization failed: HTTP 401', permanent: true });
  });

  it('a crash restarts at once, until crashLimit crashes within the window', () => {
    const { p, clock } = policy({ crashLimit: 3, crashWindowMs: 60_000 });
    expect(p.onFailure('crash', 'exit 1')).toEqual({ action: 'schedule', delayMs: 0 });
    clock.advance(10_000);
    expect(p.onFailure('crash', 'exit 1')).toEqual({ action: 'schedule', delayMs: 0 });
    clock.advance(10_000);
    expect(p.onFailure('crash', 'exit 2')).toEqual({ action: 'stop', status: 'failed', reason: 'crashed 3 times within 60 s; last: exit 2' });
    expect(p.recentCrashes).toBe(3);
  });

  it('crashes that fall out of the window are forgotten', () => {
    const { p, clock } = policy({ crashLimit: 2, crashWindowMs: 1000 });
    p.onFailure('crash', 'x');
    clock.advance(1000);
    expect(p.onFailure('crash', 'x')).toEqual({ action: 'schedule', delayMs: 0 });
    expect(p.recentCrashes).toBe(1);
  });

  it('staysFailed (a call probing a failed server): no decision, but the crash still counts', () => {
    const { p } = policy();
    expect(p.onFailure('loss', 'x', true)).toEqual({ action: 'none' });
    expect(p.onFailure('crash', 'x', true)).toEqual({ action: 'none' });
    expect(p.recentCrashes).toBe(1);
    expect(p.onFailure('auth', 'x', true).action).toBe('stop');
  });

  it('reset (manual retry) forgets the crashes and the streak', () => {
    const { p } = policy({ crashLimit: 2 });
    p.onFailure('crash', 'x');
    p.reset();
    expect(p.recentCrashes).toBe(0);
    expect(p.streakFailures).toBe(0);
    expect(p.onFailure('crash', 'x')).toEqual({ action: 'schedule', delayMs: 0 });
  });
});

describe('AttemptScheduler (fake timers)', () => {
  it('one attempt in flight (a second caller joins it); a schedule fires one retry, replaced by a later one, cancelled by run()', async () => {
    vi.useFakeTimers();
    try {
      const triggers: string[] = [];
      let release: (ok: boolean) => void = () => {};
      const s = new AttemptScheduler((trigger) => {
        triggers.push(trigger);
        return new Promise<boolean>((resolve) => (release = resolve));
      });
      const a = s.run('initial');
      expect(s.run('call')).toBe(a);
      release(false);
      await a;
      expect(s.inflight).toBeNull();
      s.schedule(1000);
      s.schedule(5000); // replaces the first
      expect(s.nextRetryAt).toBe(Date.now() + 5000);
      await vi.advanceTimersByTimeAsync(4999);
      expect(triggers).toEqual(['initial']);
      await vi.advanceTimersByTimeAsync(1);
      expect(triggers).toEqual(['initial', 'retry']);
      release(true);
      await s.inflight;
      s.schedule(1000);
      void s.run('manual'); // cancels the scheduled one
      expect(s.nextRetryAt).toBeNull();
      await vi.advanceTimersByTimeAsync(2000);
      expect(triggers).toEqual(['initial', 'retry', 'manual']);
    } finally {
      vi.useRealTimers();
    }
  });
});

describe('FailureRecord (injected clock)', () => {
  it('keeps the last failure after a recovery, counts recoveries, and a permanent stop until a retry', () => {
    let now = 1000;
    const r = new FailureRecord(() => now);
    r.fail('boom');
    r.stop('crashed 3 times within 300 s; last: boom', true);
    expect([r.lastError, r.reason, r.permanent]).toEqual(['boom', 'crashed 3 times within 300 s; last: boom', true]);
    r.retrying();
    expect([r.reason, r.permanent]).toEqual([null, false]);
    now = 5000;
    r.connected();
    expect(r.lastError).toBeNull();
    expect(r.lastFailure).toEqual({ error: 'boom', at: 1000, lastAttemptAt: 1000, recoveredAt: 5000 });
    r.connected(); // connected again without a failure between: no new recovery
    expect(r.restarts).toBe(1);
  });

  it('while it stays down, a failed retry keeps when it went down and moves only the latest attempt', () => {
    let now = 1000;
    const r = new FailureRecord(() => now);
    r.fail('connection lost');
    now = 3000;
    r.fail('ECONNREFUSED');
    now = 7000;
    r.fail('ECONNREFUSED again');
    expect(r.lastFailure).toEqual({ error: 'ECONNREFUSED again', at: 1000, lastAttemptAt: 7000, recoveredAt: null });
    now = 9000;
    r.connected();
    now = 12_000;
    r.fail('down again');
    expect(r.lastFailure).toEqual({ error: 'down again', at: 12_000, lastAttemptAt: 12_000, recoveredAt: null });
    expect(r.restarts).toBe(1);
  });
});

describe('LinkWatch (fake timers)', () => {
  it('a short drop gives no verdict; a recovery longer than the grace, or a failed attempt, is down; connected again is up', async () => {
    vi.useFakeTimers();
    try {
      const verdicts: string[] = [];
      const w = new LinkWatch({ down: (reason) => verdicts.push(`down: ${reason}`), up: () => verdicts.push('up'), restarting: () => verdicts.push('restarting') }, 1000);
      const change = (state: 'connected' | 'recovering', reason?: string) => w.onState({ state, previous: state === 'connected' ? 'recovering' : 'connected', generation: 1, attempt: 1, reason });
      change('recovering');
      await vi.advanceTimersByTimeAsync(999);
      change('connected');
      await vi.advanceTimersByTimeAsync(5000);
      expect(verdicts).toEqual([]);
      change('recovering', 'no pong within 2000 ms (link dead)');
      await vi.advanceTimersByTimeAsync(1000);
      expect(verdicts).toEqual(['down: the tether link has been down for 1.0 s (no pong within 2000 ms (link dead))']);
      w.onRetry({ attempt: 1, error: Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' }) });
      expect(verdicts.at(-1)).toBe('down: the tether server cannot be reached (socket hang up)');
      change('connected');
      expect(verdicts.at(-1)).toBe('up');
    } finally {
      vi.useRealTimers();
    }
  });

  it('told "restarting": one restarting verdict, then no down verdict while the successor is awaited (no grace, refusals expected); connected again is up', async () => {
    vi.useFakeTimers();
    try {
      const verdicts: string[] = [];
      const w = new LinkWatch({ down: (reason) => verdicts.push(`down: ${reason}`), up: () => verdicts.push('up'), restarting: (keptMs) => verdicts.push(`restarting ${keptMs}`) }, 1000);
      w.onRestarting({ generation: 1, keptMs: 30_000 });
      w.onState({ state: 'recovering', previous: 'connected', generation: 1, attempt: 1, reason: 'connection closed (1012)' });
      await vi.advanceTimersByTimeAsync(5000);
      w.onRetry({ attempt: 1, error: Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' }) });
      expect(verdicts).toEqual(['restarting 30000']);
      w.onState({ state: 'connected', previous: 'recovering', generation: 2, attempt: 2 });
      expect(verdicts).toEqual(['restarting 30000', 'up']);
      // A later plain drop is judged as any other again.
      w.onState({ state: 'recovering', previous: 'connected', generation: 2, attempt: 1 });
      await vi.advanceTimersByTimeAsync(1000);
      expect(verdicts.at(-1)).toBe('down: the tether link has been down for 1.0 s');
    } finally {
      vi.useRealTimers();
    }
  });
});
