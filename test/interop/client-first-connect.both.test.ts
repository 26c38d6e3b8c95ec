/**
 * The first connect is a connect like any other: transport failures (a reset at accept, a
 * cut during the handshake) are retried with backoff within the recovery deadline; only a
 * deadline, an auth refusal or an abort end it. Against tether and the real Codex server.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ExecClient } from '../../src/client/index.js';
import { ChaosProxy } from '../../src/chaos/proxy.js';
import { startTarget, type Target } from '../helpers/target.js';

let target: Target;
let proxy: ChaosProxy;

beforeAll(async () => {
  target = await startTarget();
  proxy = await ChaosProxy.inFrontOf(target.url);
});
afterEach(() => proxy.heal());
afterAll(async () => {
  await proxy?.close();
  await target?.stop();
});

describe('ExecClient.connect', () => {
  it('retries a link that resets the first two connections, then works', async () => {
    proxy.refuseNext(2);
    const warnings: string[] = [];
    const client = await ExecClient.connect(proxy.url, {
      clientName: 'first-connect',
      logger: (level, message) => level === 'warn' && warnings.push(message),
    });
    try {
      expect(proxy.stats().refused).toBe(2);
      expect(client.state).toBe('connected');
      expect(warnings).toEqual([expect.stringMatching(/^cannot reach ws:\/\/127\.0\.0\.1:\d+ \(.+\); retrying for up to 25 s$/)]);
      const proc = client.spawn(['sh', '-c', 'echo hello']);
      let out = '';
      proc.stdout.on('data', (d: Buffer) => (out += d.toString()));
      expect(await proc.exited).toBe(0);
      await proc.closed;
      expect(out).toBe('hello\n');
    } finally {
      await client.close();
    }
  });

  it('gives up at the recovery deadline with the last transport error', async () => {
    proxy.refuse(true);
    const started = Date.now();
    const error = await ExecClient.connect(proxy.url, { recoveryDeadlineMs: 600 }).catch((e: Error) => e);
    const took = Date.now() - started;
    expect(error).toBeInstanceOf(Error);
    expect((error as Error).message).toMatch(/ECONNRESET|socket hang up|closed|reset/i);
    expect((error as Error).message).toMatch(/\d+ attempts in 0\.6 s, the recovery deadline/);
    expect(proxy.stats().refused).toBeGreaterThan(2);
    expect(took).toBeGreaterThanOrEqual(600);
    expect(took).toBeLessThan(5000);
  });

  it('an abort ends the retries at once', async () => {
    proxy.refuse(true);
    const aborter = new AbortController();
    const pending = ExecClient.connect(proxy.url, { signal: aborter.signal }).catch((e: unknown) => e);
    while (proxy.stats().refused < 2) await new Promise((r) => setTimeout(r, 10));
    const abortedAt = Date.now();
    aborter.abort(new Error('user gave up'));
    expect(await pending).toMatchObject({ message: 'user gave up' });
    expect(Date.now() - abortedAt).toBeLessThan(1000);
  });
});
