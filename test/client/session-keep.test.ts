/**
 * `ExecClient` option `sessionKeepMs` (extension `sessionKeep`): asked on initialize and on
 * every resume, what the server granted in `client.sessionKeep`; nothing asked without it;
 * null against a server that does not take a keep. Loopback only, no timing.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChaosProxy } from '../../src/chaos/proxy.js';
import { ExecClient } from '../../src/client/index.js';
import { serverInternals } from '../../src/server/server.js';
import { startTetherServer, type TetherTarget } from '../helpers/tether.js';

let target: TetherTarget;
let proxy: ChaosProxy;

beforeAll(async () => {
  target = await startTetherServer({ sessionTtlMs: 1000, maxSessionTtlMs: 3_600_000 });
  proxy = await ChaosProxy.inFrontOf(target.url);
});

afterAll(async () => {
  await proxy?.close();
  await target?.stop();
});

const sessionOf = (client: ExecClient) => serverInternals(target.server).sessions.get(client.sessionId)!;

describe('ExecClient sessionKeepMs', () => {
  it('says what the server granted: the maximum when it asked more', async () => {
    const client = await ExecClient.connect(target.url, { sessionKeepMs: 10 * 3_600_000 });
    try {
      expect(client.sessionKeep).toEqual({ askedMs: 36_000_000, grantedMs: 3_600_000, maxMs: 3_600_000 });
      expect(sessionOf(client).limits.ttlMs).toBe(3_600_000);
    } finally {
      await client.close();
    }
  });

  it('without it: the server’s session TTL, nothing asked', async () => {
    const client = await ExecClient.connect(target.url);
    try {
      expect(client.sessionKeep).toEqual({ askedMs: null, grantedMs: 1000, maxMs: 3_600_000 });
    } finally {
      await client.close();
    }
  });

  it('null when the extension is not negotiated (the Codex dialect)', async () => {
    const client = await ExecClient.connect(target.url, { sessionKeepMs: 600_000, extensions: [] });
    try {
      expect(client.sessionKeep).toBeNull();
      expect(sessionOf(client).limits.ttlMs).toBe(1000);
    } finally {
      await client.close();
    }
  });

  it('asks again on every resume', async () => {
    const client = await ExecClient.connect(proxy.url, { sessionKeepMs: 600_000, recoveryDeadlineMs: 10_000 });
    try {
      const session = sessionOf(client);
      expect(session.limits.ttlMs).toBe(600_000);
      // As if a successor server had granted something else: the resume's ask sets it again.
      session.keepFor(5000);
      const recovered = new Promise((resolve) => client.once('recovered', resolve));
      proxy.cutAll();
      await recovered;
      expect(session.limits.ttlMs).toBe(600_000);
    } finally {
      await client.close();
    }
  });

  it('refuses a keep that is not a duration', async () => {
    await expect(ExecClient.connect(target.url, { sessionKeepMs: -1 })).rejects.toThrow(/sessionKeepMs must be a non-negative number/);
  });
});
