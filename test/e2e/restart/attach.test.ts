/**
 * A session's name (extension `attach`) survives a restart: the server is killed -9 while its
 * writer is away, and on the successor (same state dir) the adopted session is found by its
 * name, by a watcher and by a writer, and the name is still taken for its token.
 */
import { describe, expect, it } from 'vitest';
import { RawClient, b64 } from '../../helpers/raw-client.js';
import { restartablesAfterEach } from '../../helpers/restart-per-test.js';
import { serverUsers } from '../../helpers/server-process.js';

const TEST_TIMEOUT_MS = 45_000;

const restartables = restartablesAfterEach();
const connect = (url: string): Promise<RawClient> => restartables.pool.connect(url);

const extensions = ['acks', 'sessionList', 'attach'];

describe.each(serverUsers())('a session name across a restart (server as %s)', (user) => {
  it(
    'the successor finds the adopted session by its name, as a watcher and as the writer, and keeps the name taken',
    async () => {
      const server = await restartables.start(user, ['--session-ttl', '1h']);
      const raw = await connect(server.url);
      const init = await raw.request('initialize', { clientName: 'attach-restart', tether: { version: 1, extensions, name: 'nightly' } });
      raw.notify('initialized', {});
      expect(init.tether.name).toBe('nightly');
      await raw.request('process/start', { processId: 'cat', argv: ['cat'], cwd: 'file:///tmp', env: { PATH: process.env.PATH ?? '/usr/bin:/bin' }, tty: false, pipeStdin: true });

      await server.stop('SIGKILL');
      await raw.drop();
      await server.successor();

      const watcher = await connect(server.url);
      const watched = await watcher.request('initialize', { clientName: 'watcher', tether: { version: 1, extensions, attach: { session: 'nightly', role: 'watcher' } } });
      watcher.notify('initialized', {});
      expect(watched.tether.attached).toMatchObject({ sessionId: init.sessionId, name: 'nightly', role: 'watcher' });
      expect(watched.tether.attached.processes.map((p: { processId: string }) => p.processId)).toEqual(['cat']);
      const listed = await watcher.request('session/list', {});
      expect(listed.sessions).toEqual([expect.objectContaining({ name: 'nightly', adopted: true, attached: false, watchers: 1 })]);

      const taken = await connect(server.url);
      const refused = await taken.call('initialize', { clientName: 'again', tether: { version: 1, extensions, name: 'nightly' } });
      expect(refused.error?.code).toBe(-32602);

      const writer = await connect(server.url);
      const attached = await writer.request('initialize', { clientName: 'attach-restart', tether: { version: 1, extensions, attach: { session: 'nightly', role: 'writer' }, delivered: {} } });
      writer.notify('initialized', {});
      expect(attached.sessionId).toBe(init.sessionId);
      expect((await writer.request('process/write', { processId: 'cat', chunk: b64('after\n'), writeId: 'w1' })).status).toBe('accepted');
      let text = '';
      let afterSeq = 0;
      while (!text.includes('after\n')) {
        const r = await watcher.request('process/read', { processId: 'cat', afterSeq, waitMs: 10_000 });
        for (const c of r.chunks) text += Buffer.from(c.chunk, 'base64').toString();
        afterSeq = r.nextSeq - 1;
      }
      expect(text).toBe('after\n');
    },
    TEST_TIMEOUT_MS,
  );
});
