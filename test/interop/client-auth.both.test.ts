/** Bearer tokens and aborting: refused credentials are a SessionLostError('auth'), never a retry loop. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AuthRefusedError, ExecClient, SessionLostError } from '../../src/client/index.js';
import { ChaosProxy } from '../../src/chaos/proxy.js';
import { startTarget, type Target } from '../helpers/target.js';
import { collect } from '../helpers/client-util.js';

let target: Target;

beforeAll(async () => {
  target = await startTarget({ token: 'sesame-0123456789' });
});

afterAll(async () => {
  await target?.stop();
});

describe('ExecClient authentication', () => {
  it('connects with the right token', async () => {
    const client = await ExecClient.connect(target.url, { token: 'sesame-0123456789' });
    try {
      expect(await collect(client.spawn(['echo', 'in']).stdout)).toBe('in\n');
    } finally {
      await client.close();
    }
  });

  it.each([[undefined], ['wrong-token']])('refuses token %s with SessionLostError reason auth and the server text', async (token) => {
    const error = await ExecClient.connect(target.url, { token }).then(
      () => null,
      (err: unknown) => err,
    );
    expect(error).toBeInstanceOf(SessionLostError);
    expect((error as SessionLostError).reason).toBe('auth');
    expect((error as SessionLostError).cause).toBeInstanceOf(AuthRefusedError);
    expect((error as SessionLostError).message).toMatch(/401.*(missing|invalid) websocket bearer token/);
  });

  it('an aborted signal cancels connect; aborting later closes the client', async () => {
    await expect(ExecClient.connect(target.url, { token: 'sesame-0123456789', signal: AbortSignal.abort() })).rejects.toThrow();
    const controller = new AbortController();
    const client = await ExecClient.connect(target.url, { token: 'sesame-0123456789', signal: controller.signal });
    const proc = client.spawn(['sleep', '30']);
    await new Promise((resolve) => proc.once('spawn', resolve));
    const closed = new Promise<{ reason?: string; error?: Error }>((resolve) => client.on('state', (s) => s.state === 'closed' && resolve(s)));
    controller.abort();
    // close() kills what still runs and lets the exit arrive before the session ends.
    expect(await proc.exited).toBe(137);
    // A close asked for (here by the signal) is not a failure: no reason, no error.
    const change = await closed;
    expect(change.reason).toBeUndefined();
    expect(change.error).toBeUndefined();
    expect(client.state).toBe('closed');
    const after = await client.spawn(['true']).exited.then(() => null, (e: unknown) => e);
    expect(after).toBeInstanceOf(SessionLostError);
    expect((after as SessionLostError).reason).toBe('closed');
  });

  it('a server that comes back refusing the token fails the session with reason auth (no retry loop)', async () => {
    const own = await startTarget({ token: 'first-token-0123456789' });
    const port = Number(new URL(own.url).port);
    let restarted: Target | undefined;
    const proxy = await ChaosProxy.inFrontOf(own.url);
    try {
      const client = await ExecClient.connect(proxy.url, { token: 'first-token-0123456789' });
      const failed = new Promise<{ error?: Error }>((resolve) => client.on('state', (s) => s.state === 'failed' && resolve(s)));
      // The link dies silently first (a tether server that stops says so, and the client would
      // fail with 'stopped' at once: test/server/stop-notice.test.ts); retries are refused meanwhile.
      proxy.refuse(true);
      proxy.cutAll();
      await own.stop();
      restarted = await startTarget({ token: 'rotated-token-0123456789', port });
      proxy.refuse(false);
      const change = await failed;
      expect(change.error).toBeInstanceOf(SessionLostError);
      expect((change.error as SessionLostError).reason).toBe('auth');
      expect((change.error as SessionLostError).cause).toBeInstanceOf(AuthRefusedError);
    } finally {
      await proxy.close();
      await restarted?.stop();
      await own.stop().catch(() => {});
    }
  });
});
