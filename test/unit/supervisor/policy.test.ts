/**
 * The supervisor's retry, crash and health policy under fake timers, against an in-process
 * MCP server (test/helpers/memory-mcp-peer.ts) whose failures the test chooses.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import fc from 'fast-check';
import {
  ServerSupervisor,
  ServerUnavailableError,
  SUPERVISOR_EVENT_NAMES,
  backoffDelay,
  baseDelay,
  DEFAULT_BACKOFF,
  CrashWindow,
  type ServerKind,
  type ServerSupervisorOptions,
  type SupervisorEventName,
} from '../../../src/supervisor/index.js';
import { MemoryMcpPeer } from '../../helpers/memory-mcp-peer.js';

type Recorded = [SupervisorEventName, Record<string, unknown>];

function supervise(kind: ServerKind, peer: MemoryMcpPeer, options: ServerSupervisorOptions = {}) {
  const spec = kind === 'http' ? { name: 'peer', kind, url: 'http://127.0.0.1:9/mcp' } : { name: 'peer', kind, command: 'unused' };
  const sup = new ServerSupervisor(spec as never, { transportFactory: peer.factory, random: () => 0.5, ...options });
  const events: Recorded[] = [];
  for (const name of SUPERVISOR_EVENT_NAMES) sup.on(name, (p: object) => events.push([name, p as Record<string, unknown>]));
  const names = () => events.map(([n]) => n);
  return { sup, events, names };
}

/** Lets promise chains (connect, discovery) and zero-delay restarts run without moving the clock. */
async function settle(): Promise<void> {
  // fake-timers turn a 0 ms timer set during a tick into 1 ms: step 1 ms at a time.
  for (let i = 0; i < 10; i++) await vi.advanceTimersByTimeAsync(1);
}

describe('backoff (pure)', () => {
  it('doubles from 1 s and caps at 180 s', () => {
    const seq = Array.from({ length: 11 }, (_, i) => baseDelay(i + 1));
    expect(seq).toEqual([1000, 2000, 4000, 8000, 16000, 32000, 64000, 128000, 180000, 180000, 180000]);
    expect(baseDelay(10_000)).toBe(180_000);
  });

  it('keeps jitter within ±10 %, reaching both ends', () => {
    expect(backoffDelay(1, DEFAULT_BACKOFF, () => 0)).toBe(900);
    expect(backoffDelay(1, DEFAULT_BACKOFF, () => 0.5)).toBe(1000);
    expect(backoffDelay(1, DEFAULT_BACKOFF, () => 0.999999)).toBe(1100);
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 60 }), fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }), (attempt, r) => {
        const base = baseDelay(attempt);
        const d = backoffDelay(attempt, DEFAULT_BACKOFF, () => r);
        return d >= Math.floor(base * 0.9) && d <= Math.ceil(base * 1.1);
      }),
    );
  });

  it('honours a custom policy', () => {
    const policy = { initialMs: 100, factor: 3, maxMs: 1000, jitter: 0 };
    expect([1, 2, 3, 4].map((n) => backoffDelay(n, policy))).toEqual([100, 300, 900, 1000]);
  });
});

describe('crash window (pure)', () => {
  it('counts crashes inside a sliding window', () => {
    let now = 0;
    const w = new CrashWindow(3, 300_000, () => now);
    expect(w.record()).toBe(false);
    now = 200_000;
    expect(w.record()).toBe(false);
    now = 301_000; // the first crash left the window
    expect(w.record()).toBe(false);
    expect(w.count).toBe(2);
    now = 302_000;
    expect(w.record()).toBe(true);
  });
});

describe('supervisor policy (fake timers)', () => {
  let peer: MemoryMcpPeer;
  beforeEach(() => {
    vi.useFakeTimers();
    peer = new MemoryMcpPeer();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('reconnects after a loss with 1 s ×2 backoff, and success resets the sequence', async () => {
    const { sup, events, names } = supervise('http', peer, { healthIntervalMs: 0 });
    await sup.start();
    expect(sup.status).toBe('connected');
    expect(sup.tools.map((t) => t.name)).toEqual(['echo']);
    peer.mode = 'refuse';
    await peer.kill();
    expect(sup.status).toBe('reconnecting');

    const delays: number[] = [];
    for (let i = 0; i < 5; i++) {
      const last = events.filter(([n]) => n === 'server_reconnecting').at(-1)![1];
      delays.push(last.nextRetryMs as number);
      const before = peer.attempts;
      await vi.advanceTimersByTimeAsync((last.nextRetryMs as number) - 1);
      expect(peer.attempts).toBe(before); // not a millisecond early
      await vi.advanceTimersByTimeAsync(1);
      expect(peer.attempts).toBe(before + 1);
    }
    expect(delays).toEqual([1000, 2000, 4000, 8000, 16000]);
    expect(sup.summary()).toMatchObject({ status: 'reconnecting', attempt: 6, nextRetryMs: 32000, lastError: expect.stringContaining('ECONNREFUSED') });

    peer.mode = 'ok';
    await vi.advanceTimersByTimeAsync(32000);
    expect(sup.status).toBe('connected');
    expect(events.at(-1)).toEqual(['server_reconnected', expect.objectContaining({ attemptsTaken: 6, capabilities: expect.any(Object) })]);
    expect(sup.summary()).toMatchObject({ attempt: 0, nextRetryMs: null, lastError: null });

    // Reset: the next loss starts again at 1 s.
    events.length = 0;
    peer.mode = 'refuse';
    await peer.kill();
    expect(events[0]).toEqual(['server_disconnected', expect.objectContaining({ wasIntentional: false })]);
    expect(events[1]).toEqual(['server_reconnecting', expect.objectContaining({ attempt: 1, nextRetryMs: 1000 })]);
    expect(names()).toEqual(['server_disconnected', 'server_reconnecting']);
    await sup.stop();
  });

  it('caps the delay and applies jitter from the injected random source', async () => {
    const { sup, events } = supervise('http', peer, { healthIntervalMs: 0, random: () => 0, backoff: { initialMs: 1000, factor: 2, maxMs: 5000, jitter: 0.1 } });
    peer.mode = 'refuse';
    await sup.start();
    for (let i = 0; i < 5; i++) await vi.advanceTimersByTimeAsync(10_000);
    const delays = events.filter(([n]) => n === 'server_reconnecting').map(([, p]) => p.nextRetryMs);
    // random 0 → -10 %: 900, 1800, 3600, then the 5000 cap -10 %.
    expect(delays.slice(0, 5)).toEqual([900, 1800, 3600, 4500, 4500]);
    await sup.stop();
  });

  it('maxRetries reached → failed with server_failed, and no further attempts', async () => {
    const { sup, names, events } = supervise('http', peer, { healthIntervalMs: 0, maxRetries: 2 });
    await sup.start();
    peer.mode = 'refuse';
    await peer.kill();
    await vi.advanceTimersByTimeAsync(1000);
    await vi.advanceTimersByTimeAsync(2000);
    expect(sup.status).toBe('failed');
    expect(names()).toEqual(['server_connected', 'tools_list_changed', 'server_disconnected', 'server_reconnecting', 'server_reconnecting', 'server_failed']);
    expect(events.at(-1)![1]).toMatchObject({ status: 'failed', reason: expect.stringContaining('gave up after 2 retries') });
    const attempts = peer.attempts;
    await vi.advanceTimersByTimeAsync(3_600_000);
    expect(peer.attempts).toBe(attempts);
    expect(sup.summary().nextRetryMs).toBeNull();
  });

  it('a tool call to a failed server tries at once, even past maxRetries', async () => {
    const { sup, names } = supervise('http', peer, { healthIntervalMs: 0, maxRetries: 0 });
    await sup.start();
    peer.mode = 'refuse';
    await peer.kill();
    expect(sup.status).toBe('failed');

    // Still down: the call makes exactly one attempt and fails with the whole story.
    let attempts = peer.attempts;
    const err = await sup.callTool('echo', { message: 'x' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ServerUnavailableError);
    expect((err as Error).message).toMatch(/status failed, attempt 1, no automatic retry .*last error: .*ECONNREFUSED/);
    expect(peer.attempts).toBe(attempts + 1);
    expect(sup.status).toBe('failed');
    await vi.advanceTimersByTimeAsync(600_000);
    expect(peer.attempts).toBe(attempts + 1); // the call did not restart the retry loop

    // Back up: the call's attempt connects and the call goes through.
    peer.mode = 'ok';
    attempts = peer.attempts;
    const result = await sup.callTool('echo', { message: 'hello' });
    expect(result.content).toEqual([{ type: 'text', text: 'echo: hello' }]);
    expect(peer.attempts).toBe(attempts + 1);
    expect(sup.status).toBe('connected');
    expect(names().at(-1)).toBe('server_reconnected');
    await sup.stop();
  });

  it('a tool call to a reconnecting server cancels the scheduled retry and tries now', async () => {
    const { sup } = supervise('http', peer, { healthIntervalMs: 0 });
    await sup.start();
    peer.mode = 'refuse';
    await peer.kill();
    await vi.advanceTimersByTimeAsync(1000); // retry 1 fails → retry 2 in 2 s
    expect(sup.summary()).toMatchObject({ status: 'reconnecting', attempt: 2 });
    peer.mode = 'ok';
    const before = peer.attempts;
    const result = await sup.callTool('echo', { message: 'now' }); // no clock movement needed
    expect(result.content).toEqual([{ type: 'text', text: 'echo: now' }]);
    expect(peer.attempts).toBe(before + 1);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(peer.attempts).toBe(before + 1); // the cancelled retry never fires
    await sup.stop();
  });

  it('keeps one attempt in flight: concurrent calls share it, and get an error saying why', async () => {
    const { sup } = supervise('http', peer, { healthIntervalMs: 0, connectTimeoutMs: 5000 });
    await sup.start();
    peer.mode = 'hang'; // connects but never answers initialize
    await peer.kill();
    const before = peer.attempts;
    const calls = [1, 2, 3].map(() => sup.callTool('echo', {}).catch((e: unknown) => e));
    await settle();
    expect(peer.attempts).toBe(before + 1);
    await vi.advanceTimersByTimeAsync(5000); // the attempt times out
    const errors = await Promise.all(calls);
    for (const e of errors) {
      expect(e).toBeInstanceOf(ServerUnavailableError);
      expect((e as Error).message).toMatch(/status reconnecting, attempt \d+, next retry in [\d.]+ s, last error: .*timed out/);
    }
    expect(peer.attempts).toBe(before + 1);
    await sup.stop();
  });

  it('stdio crash policy: a server that exits at once is restarted at once, then failed after 3 crashes', async () => {
    peer.mode = 'exit';
    const { sup, events, names } = supervise('stdio', peer, { healthIntervalMs: 0 });
    await sup.start();
    await settle();
    expect(sup.status).toBe('failed');
    expect(peer.attempts).toBe(3);
    expect(names()).toEqual(['server_reconnecting', 'server_reconnecting', 'server_failed']);
    expect(events.slice(0, 2).map(([, p]) => p.nextRetryMs)).toEqual([0, 0]); // no backoff for crashes
    expect(events[2]![1].reason).toMatch(/crashed 3 times within 300 s/);
    await vi.advanceTimersByTimeAsync(3_600_000);
    expect(peer.attempts).toBe(3); // failed until a manual retry

    peer.mode = 'ok';
    const detail = await sup.retry();
    expect(detail).toMatchObject({ status: 'connected', recentCrashes: 0 });
    await sup.stop();
  });

  it('stdio crash window: crashes spread over more than 5 minutes keep being restarted', async () => {
    const { sup, names } = supervise('stdio', peer, { healthIntervalMs: 0 });
    await sup.start();
    for (let i = 0; i < 4; i++) {
      await peer.kill();
      await settle();
      expect(sup.status).toBe('connected');
      await vi.advanceTimersByTimeAsync(151_000); // two crashes per window at most
    }
    expect(names().filter((n) => n === 'server_reconnected')).toHaveLength(4);
    await vi.advanceTimersByTimeAsync(300_000); // the window empties
    // Now three quick crashes: failed.
    await peer.kill();
    await settle();
    await peer.kill();
    await settle();
    expect(sup.status).toBe('connected');
    await peer.kill();
    await settle();
    expect(sup.status).toBe('failed');
    expect(names().at(-1)).toBe('server_failed');
    await sup.stop();
  });

  it('401 → requires_reauth, never retried automatically or by calls; a manual retry tries again', async () => {
    peer.mode = 'auth';
    const { sup, names, events } = supervise('http', peer, { healthIntervalMs: 0 });
    await sup.start();
    expect(sup.status).toBe('requires_reauth');
    expect(names()).toEqual(['server_failed']);
    expect(events[0]![1]).toMatchObject({ status: 'requires_reauth', reason: expect.stringContaining('401') });
    await vi.advanceTimersByTimeAsync(3_600_000);
    expect(peer.attempts).toBe(1);
    const err = await sup.callTool('echo', {}).catch((e: unknown) => e);
    expect((err as Error).message).toMatch(/status requires_reauth.*fix the credentials/);
    expect(peer.attempts).toBe(1);
    peer.mode = 'ok';
    expect((await sup.retry()).status).toBe('connected');
    await sup.stop();
  });

  it('health: 3 consecutive failed pings → degraded (still connected, no reconnect); a success restores', async () => {
    const { sup, events, names } = supervise('http', peer, { random: () => 0.5 });
    await sup.start();
    const attempts = peer.attempts;
    peer.ping = 'error';
    await vi.advanceTimersByTimeAsync(119_999);
    expect(peer.pings).toBe(0);
    await vi.advanceTimersByTimeAsync(1);
    expect(peer.pings).toBe(1);
    await vi.advanceTimersByTimeAsync(120_000);
    expect(sup.health).toBe('healthy');
    expect(sup.detail().consecutiveHealthFailures).toBe(2);
    await vi.advanceTimersByTimeAsync(120_000);
    expect(sup.health).toBe('degraded');
    expect(events.at(-1)).toEqual(['server_health_degraded', expect.objectContaining({ consecutiveFailures: 3, lastError: expect.stringContaining('ping failed') })]);
    await vi.advanceTimersByTimeAsync(120_000); // a 4th failure does not repeat the event
    expect(names().filter((n) => n === 'server_health_degraded')).toHaveLength(1);
    expect(sup.status).toBe('connected');
    expect(peer.attempts).toBe(attempts);

    peer.ping = 'ok';
    await vi.advanceTimersByTimeAsync(120_000);
    expect(sup.health).toBe('healthy');
    expect(names().at(-1)).toBe('server_health_restored');
    await sup.stop();
  });

  it('health: a ping that never answers fails after the 60 s timeout; the interval is jittered ±10 %', async () => {
    const { sup } = supervise('http', peer, { random: () => 0 });
    await sup.start();
    peer.ping = 'hang';
    await vi.advanceTimersByTimeAsync(107_999); // 120 s - 10 %
    expect(peer.pings).toBe(0);
    await vi.advanceTimersByTimeAsync(1);
    expect(peer.pings).toBe(1);
    await vi.advanceTimersByTimeAsync(59_999);
    expect(sup.detail().consecutiveHealthFailures).toBe(0);
    await vi.advanceTimersByTimeAsync(1);
    expect(sup.detail()).toMatchObject({ consecutiveHealthFailures: 1, lastHealthError: expect.stringMatching(/timed out/i) });
    await sup.stop();
  });

  it('health: falls back to tools/list when ping is unsupported', async () => {
    const { sup } = supervise('http', peer, {});
    await sup.start();
    peer.ping = 'unsupported';
    const lists = peer.listToolsCalls;
    await vi.advanceTimersByTimeAsync(132_000);
    expect(peer.pings).toBe(1);
    expect(peer.listToolsCalls).toBe(lists + 1);
    expect(sup.detail().consecutiveHealthFailures).toBe(0);
    await vi.advanceTimersByTimeAsync(132_000);
    expect(peer.pings).toBe(1); // not asked again
    expect(peer.listToolsCalls).toBe(lists + 2);
    await sup.stop();
  });

  it('health checks pause while reconnecting', async () => {
    const { sup } = supervise('http', peer, { maxRetries: undefined });
    await sup.start();
    peer.mode = 'refuse';
    await peer.kill();
    await vi.advanceTimersByTimeAsync(1_000_000);
    expect(peer.pings).toBe(0);
    expect(sup.status).toBe('reconnecting');
    await sup.stop();
  });

  it('re-discovers tools after reconnecting, keeping the last known list when discovery fails', async () => {
    const { sup, names } = supervise('stdio', peer, { healthIntervalMs: 0 });
    await sup.start();
    peer.tools = ['echo', 'sum'];
    await peer.kill();
    await settle();
    expect(sup.tools.map((t) => t.name)).toEqual(['echo', 'sum']);
    expect(names()).toEqual(['server_connected', 'tools_list_changed', 'server_disconnected', 'server_reconnecting', 'server_reconnected', 'tools_list_changed']);

    peer.tools = ['other'];
    peer.failToolsList = true;
    await peer.kill();
    await settle();
    expect(sup.status).toBe('connected');
    expect(sup.tools.map((t) => t.name)).toEqual(['echo', 'sum']);
    expect(names().at(-1)).toBe('server_reconnected'); // no tools_list_changed
    await sup.stop();
  });

  it('stop() aborts a connection attempt in progress instead of waiting for its timeout', async () => {
    peer.mode = 'hang';
    const { sup, names } = supervise('http', peer, { healthIntervalMs: 0, connectTimeoutMs: 30_000 });
    const started = sup.start();
    await settle();
    expect(sup.status).toBe('connecting');
    await sup.stop(); // resolves without the clock moving 30 s
    await started;
    expect(sup.status).toBe('disconnected');
    expect(names()).toEqual([]);
    await vi.advanceTimersByTimeAsync(60_000);
    expect(peer.attempts).toBe(1);
  });

  it('a server announcing tools/list_changed is re-listed and tools_list_changed follows', async () => {
    const { sup, names, events } = supervise('stdio', peer, { healthIntervalMs: 0 });
    await sup.start();
    peer.addTool('late');
    await settle();
    expect(sup.tools.map((t) => t.name)).toEqual(['echo', 'late']);
    expect(names()).toEqual(['server_connected', 'tools_list_changed', 'tools_list_changed']);
    expect(events.at(-1)![1]).toMatchObject({ tools: ['echo', 'late'] });
    await sup.stop();
  });

  it('force reconnect of a connected server closes and reconnects', async () => {
    const { sup, names } = supervise('stdio', peer, { healthIntervalMs: 0 });
    await sup.start();
    const detail = await sup.retry();
    expect(detail.status).toBe('connected');
    expect(peer.attempts).toBe(2);
    expect(names()).toEqual(['server_connected', 'tools_list_changed', 'server_disconnected', 'server_reconnecting', 'server_reconnected']);
    await sup.stop();
    expect(names().at(-1)).toBe('server_disconnected');
    expect(sup.status).toBe('disconnected');
  });

  it('a refused protocol version (-32022) → failed at once with the reason on the row; not retried by time or by calls; a manual retry tries again', async () => {
    peer.mode = 'version';
    const { sup, names } = supervise('stdio', peer, { healthIntervalMs: 0 });
    await sup.start();
    expect(sup.status).toBe('failed');
    expect(names()).toEqual(['server_failed']);
    expect(sup.summary()).toMatchObject({
      status: 'failed',
      health: 'unknown',
      nextRetryMs: null,
      reason: expect.stringMatching(/refuses the MCP protocol versions .*Unsupported protocol version/),
      lastError: expect.stringContaining('Unsupported protocol version'),
    });
    await vi.advanceTimersByTimeAsync(3_600_000);
    const err = await sup.callTool('echo', {}).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ServerUnavailableError);
    expect(peer.attempts).toBe(2); // one attempt in each era; neither the clock nor the call tried again
    peer.mode = 'ok';
    expect((await sup.retry()).status).toBe('connected');
    expect(sup.summary().reason).toBeNull();
    await sup.stop();
  });

  it('failed after the crash window: the reason on the row, health not healthy; after a recovery the last failure and the restarts stay', async () => {
    const { sup } = supervise('stdio', peer, { healthIntervalMs: 0 });
    await sup.start();
    expect(sup.summary()).toMatchObject({ health: 'healthy', lastFailure: null, restarts: 0 });
    peer.mode = 'exit';
    await peer.kill();
    await settle();
    expect(sup.status).toBe('failed');
    expect(sup.summary()).toMatchObject({ health: 'unknown', reason: expect.stringMatching(/^crashed 3 times within 300 s; last: /) });
    peer.mode = 'ok';
    await sup.retry();
    const s = sup.summary();
    expect(s).toMatchObject({ status: 'connected', health: 'healthy', lastError: null, reason: null, restarts: 1 });
    expect(s.lastFailure).toMatchObject({ error: expect.any(String), at: expect.any(String), recoveredAt: expect.any(String) });
    expect(Date.parse(s.lastFailure!.recoveredAt!)).toBeGreaterThanOrEqual(Date.parse(s.lastFailure!.at));
    await sup.stop();
  });
});
