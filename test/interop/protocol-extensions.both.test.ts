/**
 * Extension negotiation (src/protocol/extensions.ts): a client that does not ask sees the
 * Codex result shape; a tether client asks and gets what the server accepts; the set is
 * fixed for the session. Against Codex: the request is ignored and the client falls back.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ExecClient } from '../../src/client/index.js';
import { ErrorCode, KnownExtensions } from '../../src/protocol/index.js';
import { RawClientPool } from '../helpers/raw-client.js';
import { isCodex, isRelay, startTarget, type Target } from '../helpers/target.js';
import type { TetherTarget } from '../helpers/tether.js';
import { serverInternals } from '../../src/server/server.js';

let target: Target;
const pool = new RawClientPool();

beforeAll(async () => {
  target = await startTarget();
});
afterEach(() => pool.dropAll());
afterAll(() => target?.stop());

describe('extension negotiation', () => {
  it('answers a client that does not ask with no tether member', async () => {
    const c = await pool.connect(target.url);
    const result = await c.request('initialize', { clientName: 'plain' });
    expect(Object.keys(result).sort()).toEqual(isCodex ? expect.arrayContaining(['sessionId']) : ['environmentInfo', 'sessionId']);
    expect(result).not.toHaveProperty('tether');
  });

  it('accepts the known extensions asked for and ignores unknown names', async () => {
    const c = await pool.connect(target.url);
    const result = await c.request('initialize', {
      clientName: 'ext',
      tether: { version: 1, extensions: ['noSuchExtension', ...KnownExtensions] },
    });
    if (isCodex) expect(result).not.toHaveProperty('tether');
    // sessionKeep without keepMs: the server's session TTL, and its maximum (the defaults).
    else expect(result.tether).toEqual({ version: 1, extensions: [...KnownExtensions], outputWindow: 8 * 1024 * 1024, keepMs: 30_000, keepMaxMs: 24 * 3_600_000 });
  });

  it.skipIf(isCodex)('refuses a malformed tether member with -32602 naming the field', async () => {
    const c = await pool.connect(target.url);
    const reply = await c.call('initialize', { clientName: 'bad', tether: { version: 1, extensions: 'acks' } });
    expect(reply.error?.code).toBe(ErrorCode.InvalidParams);
    expect(reply.error?.message).toMatch(/tether\.extensions/);
  });

  it.skipIf(isCodex)('keeps the set fixed: a resume must ask for the same extensions', async () => {
    const a = await pool.connect(target.url);
    const { sessionId } = await a.request('initialize', { clientName: 'a', tether: { version: 1, extensions: [...KnownExtensions] } });
    a.notify('initialized', {});
    await a.drop();
    const b = await pool.connect(target.url);
    const refused = await b.call('initialize', { clientName: 'b', resumeSessionId: sessionId });
    expect(refused.error?.code).toBe(ErrorCode.InvalidParams);
    expect(refused.error?.message).toMatch(/keeps the extensions it was created with/);
    const resumed = await b.request('initialize', {
      clientName: 'b',
      resumeSessionId: sessionId,
      tether: { version: 1, extensions: [...KnownExtensions].reverse() },
    });
    expect(resumed.sessionId).toBe(sessionId);
  });

  it('the client reports what the server accepted (nothing from Codex), and [] asks for nothing', async () => {
    const client = await ExecClient.connect(target.url, { clientName: 'ext-client' });
    const plain = await ExecClient.connect(target.url, { clientName: 'ext-plain', extensions: [] });
    try {
      expect([...client.extensions]).toEqual(isCodex ? [] : [...KnownExtensions]);
      expect([...plain.extensions]).toEqual([]);
    } finally {
      await client.close();
      await plain.close();
    }
  });

  it.skipIf(isCodex)('session/close kills the processes, forgets the session and ends the socket normally', async () => {
    const server = (target as TetherTarget).server;
    const c = await pool.connect(target.url);
    const { sessionId } = await c.request('initialize', { clientName: 'closer', tether: { version: 1, extensions: ['sessionClose'] } });
    c.notify('initialized', {});
    await c.request('process/start', { processId: 'p', argv: ['sleep', '60'], cwd: 'file:///', env: {}, tty: false });
    const proc = serverInternals(server).sessions.get(sessionId)!.processes.get('p')!;
    expect(await c.request('session/close', {})).toEqual({});
    expect(await c.closed).toMatchObject({ code: 1000, reason: 'session closed' });
    expect(serverInternals(server).sessions.has(sessionId)).toBe(false);
    await proc.whenClosed;
    expect(proc.exitCode).toBe(137);
    // killed and reaped (behind a relay the process is upstream: its 137 says it was killed there)
    if (!isRelay) expect(() => process.kill(proc.pid, 0)).toThrow();
  });

  it.skipIf(isCodex)('ExecClient.close() ends its session at once', async () => {
    const server = (target as TetherTarget).server;
    const before = server.sessionCount;
    const client = await ExecClient.connect(target.url, { clientName: 'closing-client' });
    expect(server.sessionCount).toBe(before + 1);
    await client.close();
    expect(server.sessionCount).toBe(before);
  });
});
