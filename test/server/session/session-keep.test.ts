/**
 * Extension `sessionKeep`: a client asks how long its session outlives a drop, and the server
 * grants it within its limits (at least --session-ttl, at most --max-session-ttl), saying what
 * it granted. A Codex client's session keeps --session-ttl exactly.
 *
 * No fixed wait stands for "nothing happened": a session with the plain TTL, dropped after the
 * kept one, is the clock (its `session-expired` event comes after the kept one would have gone).
 */
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { ErrorCode } from '../../../src/protocol/index.js';
import { serverInternals } from '../../../src/server/server.js';
import { RawClient } from '../../helpers/raw-client.js';
import { tetherAfterEach } from '../../helpers/tether-per-test.js';

const servers = tetherAfterEach();
const { pool } = servers;

const client = (): Promise<RawClient> => pool.connect(servers.target.url);
const keepAsk = (keepMs?: number) => ({ version: 1, extensions: ['sessionKeep', 'sessionList'], ...(keepMs === undefined ? {} : { keepMs }) });

async function initialize(c: RawClient, tether: unknown, resumeSessionId?: string): Promise<any> {
  const result = await c.request('initialize', { clientName: 'keep-test', ...(resumeSessionId ? { resumeSessionId } : {}), ...(tether ? { tether } : {}) });
  c.notify('initialized', {});
  return result;
}

function whenEvent(name: 'session-detached' | 'session-expired', sessionId: string): Promise<void> {
  return new Promise((resolve) => {
    const on = (id: string) => {
      if (id !== sessionId) return;
      servers.target.server.off(name, on);
      resolve();
    };
    servers.target.server.on(name, on);
  });
}

describe('sessionKeep', () => {
  it('grants at most --max-session-ttl to a client asking more, and says so', async () => {
    const target = await servers.start({ sessionTtlMs: 1000, maxSessionTtlMs: 300_000 });
    const result = await initialize(await client(), keepAsk(10 * 3_600_000));
    expect(result.tether.extensions).toContain('sessionKeep');
    expect(result.tether.keepMs).toBe(300_000);
    expect(result.tether.keepMaxMs).toBe(300_000);
    expect(serverInternals(target.server).sessions.get(result.sessionId)?.limits.ttlMs).toBe(300_000);
  });

  it('grants what is asked within the limits, and never less than --session-ttl', async () => {
    await servers.start({ sessionTtlMs: 2000, maxSessionTtlMs: 300_000 });
    expect((await initialize(await client(), keepAsk(60_000))).tether.keepMs).toBe(60_000);
    expect((await initialize(await client(), keepAsk(10))).tether.keepMs).toBe(2000);
    expect((await initialize(await client(), keepAsk())).tether.keepMs).toBe(2000);
  });

  it('refuses a keep that is not a whole number of milliseconds, naming it', async () => {
    await servers.start({});
    for (const keepMs of [-1, 1.5, 'long']) {
      const answer = await (await client()).call('initialize', { clientName: 'x', tether: keepAsk(keepMs as number) });
      expect(answer.error?.code).toBe(ErrorCode.InvalidParams);
      expect(answer.error?.message).toMatch(/keepMs/);
    }
  });

  it('keeps a session that asked for 10 minutes past --session-ttl, while a Codex client’s expires after it', async () => {
    const target = await servers.start({ sessionTtlMs: 1000 });
    const kept = await client();
    const init = await initialize(kept, keepAsk(600_000));
    const keptId: string = init.sessionId;
    expect(init.tether.keepMs).toBe(600_000);
    const started = await kept.call('process/start', { processId: 'p', argv: ['sh', '-c', 'echo kept'], cwd: pathToFileURL(process.cwd()).href, env: {}, tty: false });
    expect(started.error).toBeUndefined();
    await kept.waitClosed('p');

    // The Codex dialect: no tether member, the Codex answer, the server's TTL.
    const codex = await client();
    const codexInit = await initialize(codex, undefined);
    expect(codexInit.tether).toBeUndefined();
    expect(serverInternals(target.server).sessions.get(codexInit.sessionId)?.limits.ttlMs).toBe(1000);

    const keptDetached = whenEvent('session-detached', keptId);
    await kept.drop();
    await keptDetached;
    const codexExpired = whenEvent('session-expired', codexInit.sessionId);
    await codex.drop(); // dropped after the kept one: its expiry comes after the kept one's plain TTL would have run out
    await codexExpired;

    expect(serverInternals(target.server).sessions.get(keptId)?.isExpired).toBe(false);
    const back = await client();
    const resumed = await initialize(back, keepAsk(600_000), keptId);
    expect(resumed.sessionId).toBe(keptId);
    const read = await back.call('process/read', { processId: 'p', afterSeq: 0 });
    expect(read.result?.exitCode).toBe(0);
  });

  it('re-grants on every resume: a new ask replaces the last, none keeps it; session/list shows it', async () => {
    await servers.start({ sessionTtlMs: 1000, maxSessionTtlMs: 3_600_000 });
    const a = await client();
    const { sessionId } = await initialize(a, keepAsk(60_000));
    const detached = whenEvent('session-detached', sessionId);
    await a.drop();
    await detached;
    const b = await client();
    expect((await initialize(b, keepAsk(7_200_000), sessionId)).tether.keepMs).toBe(3_600_000);
    const listed = await b.call('session/list', {});
    expect(listed.result.sessions[0].keepMs).toBe(3_600_000);
    const again = whenEvent('session-detached', sessionId);
    await b.drop();
    await again;
    const c = await client();
    expect((await initialize(c, keepAsk(), sessionId)).tether.keepMs).toBe(3_600_000);
  });

  it('a Codex client asking tether extensions without sessionKeep keeps --session-ttl', async () => {
    const target = await servers.start({ sessionTtlMs: 1000 });
    const c = await client();
    const result = await initialize(c, { version: 1, extensions: ['acks'], keepMs: 600_000 });
    expect(result.tether.keepMs).toBeUndefined();
    expect(serverInternals(target.server).sessions.get(result.sessionId)?.limits.ttlMs).toBe(1000);
    const expired = whenEvent('session-expired', result.sessionId);
    await c.drop();
    await expired;
  });
});
