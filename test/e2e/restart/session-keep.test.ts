/**
 * A session's keep (extension `sessionKeep`) survives a restart: the server is killed -9
 * while its client is away, and the successor on the same state dir keeps the adopted
 * session as long as its client asked, within the successor's own --max-session-ttl (not the
 * --session-ttl of 1 s, which would end it before its client is back).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { RawClient } from '../../helpers/raw-client.js';
import { restartablesAfterEach } from '../../helpers/restart-per-test.js';
import { eventually, serverUsers } from '../../helpers/server-process.js';

const TEST_TIMEOUT_MS = 45_000;

const restartables = restartablesAfterEach();
const connect = (url: string): Promise<RawClient> => restartables.pool.connect(url);

describe.each(serverUsers())('sessionKeep across a restart (server as %s)', (user) => {
  it(
    'the successor keeps the adopted session as long as its client was granted',
    async () => {
      const server = await restartables.start(user, ['--session-ttl', '1s', '--max-session-ttl', '1h']);
      const raw = await connect(server.url);
      const extensions = ['acks', 'sessionKeep', 'sessionList'];
      const init = await raw.request('initialize', { clientName: 'keep-restart', tether: { version: 1, extensions, keepMs: 600_000 } });
      raw.notify('initialized', {});
      expect(init.tether.keepMs).toBe(600_000);
      await raw.request('process/start', { processId: 'p1', argv: ['sleep', '60'], cwd: 'file:///tmp', env: { PATH: process.env.PATH ?? '/usr/bin:/bin' }, tty: false });

      await server.stop('SIGKILL');
      await raw.drop();
      await server.successor();

      // Another session on the successor lists it: adopted, detached, kept 10 min.
      const other = await connect(server.url);
      await other.request('initialize', { clientName: 'lister', tether: { version: 1, extensions } });
      other.notify('initialized', {});
      const listed = await other.request('session/list', {});
      const adopted = listed.sessions.find((s: { session: string }) => s.session === String(init.sessionId).slice(0, 8));
      expect(adopted).toMatchObject({ adopted: true, attached: false, keepMs: 600_000 });

      // Its client comes back and asks again: granted within the successor's limits.
      const back = await connect(server.url);
      const resumed = await back.request('initialize', { clientName: 'keep-restart', resumeSessionId: init.sessionId, tether: { version: 1, extensions, keepMs: 7_200_000, delivered: {} } });
      expect(resumed.tether.keepMs).toBe(3_600_000);
      expect(resumed.tether.keepMaxMs).toBe(3_600_000);
    },
    TEST_TIMEOUT_MS,
  );

  it(
    'a resume that asks another keep is recorded: the successor keeps the new one',
    async () => {
      const server = await restartables.start(user, ['--session-ttl', '1s', '--max-session-ttl', '1h']);
      const extensions = ['acks', 'sessionKeep', 'sessionList'];
      const first = await connect(server.url);
      const init = await first.request('initialize', { clientName: 'keep-restart', tether: { version: 1, extensions, keepMs: 600_000 } });
      first.notify('initialized', {});
      await first.drop();
      let resumed: { tether: { keepMs: number } } | undefined;
      for (let attempt = 0; !resumed; attempt++) {
        // The first connection may still be attached for a moment (-32010): asked again.
        const answer = await (await connect(server.url)).call('initialize', { clientName: 'keep-restart', resumeSessionId: init.sessionId, tether: { version: 1, extensions, keepMs: 900_000 } });
        if (answer.error && (answer.error.code !== -32010 || attempt >= 200)) throw new Error(answer.error.message);
        resumed = answer.result;
      }
      expect(resumed.tether.keepMs).toBe(900_000);
      const record = join(server.stateDir, 'sessions', `${init.sessionId}.json`);
      const recordedKeep = () => (JSON.parse(readFileSync(record, 'utf8')) as { limits: { ttlMs: number } }).limits.ttlMs;
      expect(await eventually(() => recordedKeep() === 900_000, 10_000)).toBe(true);

      await server.stop('SIGKILL');
      await server.successor();
      const other = await connect(server.url);
      await other.request('initialize', { clientName: 'lister', tether: { version: 1, extensions } });
      other.notify('initialized', {});
      const listed = await other.request('session/list', {});
      expect(listed.sessions.find((s: { session: string }) => s.session === String(init.sessionId).slice(0, 8))).toMatchObject({ adopted: true, keepMs: 900_000 });
    },
    TEST_TIMEOUT_MS,
  );
});
