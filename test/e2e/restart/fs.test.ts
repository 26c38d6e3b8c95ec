/**
 * An `fsResume` session's fs state across a server restart (issue #27): `tether serve
 * --state-dir` as a child process, stopped by SIGTERM or killed -9, a successor on the same
 * port and state dir. The missing-watch is re-armed by the successor: a change after the
 * restart, or one made while no server ran, reaches the resuming client as one
 * `fs/missingChanged`. File handles do not survive: their use says so.
 *
 * Every wait is for an event (a frame, a line, an exit) or a bounded poll of a condition.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ExecClient } from '../../../src/client/index.js';
import { RawClient } from '../../helpers/raw-client.js';
import { eventually, makeStateDir, startServerProcess, type ServerProcess } from '../../helpers/server-process.js';

const TEST_TIMEOUT_MS = 40_000;

const servers: ServerProcess[] = [];
const dirs: string[] = [];

afterEach(async () => {
  for (const server of servers.splice(0)) await server.dispose();
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** `tether serve` on loopback PORT (0: any) with `--state-dir DIR`, once it printed its URL. */
async function serve(dir: string, port: number): Promise<ServerProcess> {
  const server = await startServerProcess({ port, stateDir: dir, args: ['--adopt-within', '20s'] });
  servers.push(server);
  return server;
}

/** A state dir, a work dir holding `data` ("hello"), and a server on them; all removed after the test. */
async function serveWithData(): Promise<{ dir: string; work: string; first: ServerProcess }> {
  const dir = makeStateDir('self');
  const work = mkdtempSync(join(tmpdir(), 'tether-restart-fs-'));
  dirs.push(dir, work);
  writeFileSync(join(work, 'data'), 'hello');
  return { dir, work, first: await serve(dir, 0) };
}

const initialize = (resumeSessionId?: string) => ({
  clientName: 'restart-fs',
  tether: { version: 1, extensions: ['fsResume'] },
  ...(resumeSessionId ? { resumeSessionId } : {}),
});

/** A client on `url` with the fsResume extension, its handshake done (resuming `sessionId` if given). */
async function client(url: string, sessionId?: string): Promise<{ c: RawClient; sessionId: string }> {
  const c = await RawClient.connect(url);
  const result = await c.request('initialize', initialize(sessionId));
  c.notify('initialized', {});
  return { c, sessionId: result.sessionId };
}

/** The session's record as the state dir holds it (null while unreadable). */
function record(dir: string, sessionId: string): { fs?: { watch?: { watchId: number }; handles?: string[] } } | null {
  try {
    return JSON.parse(readFileSync(join(dir, 'sessions', `${sessionId}.json`), 'utf8'));
  } catch {
    return null;
  }
}

async function until(cond: () => boolean, what: string): Promise<void> {
  if (!(await eventually(cond, 10_000))) throw new Error(`timed out waiting for ${what}`);
}

/** Stops `server` as `how` says; resolves once it exited and the client saw its connection go. */
async function stop(server: ServerProcess, c: RawClient, how: 'SIGTERM' | 'SIGKILL'): Promise<void> {
  server.child.kill(how);
  await server.exited;
  await c.closed;
}

const changed = (watchId: number) => (f: { method?: string; params?: { watchId?: number } }) => f.method === 'fs/missingChanged' && f.params?.watchId === watchId;

describe('restart: an fsResume session keeps its missing-watch, and says its file handles are gone', () => {
  for (const how of ['SIGTERM', 'SIGKILL'] as const) {
    for (const when of ['after the restart', 'while no server runs'] as const) {
      it(
        `${how}: a missing file created ${when} is told to the resumed client, once`,
        async () => {
          const dir = makeStateDir('self');
          const work = mkdtempSync(join(tmpdir(), 'tether-restart-fs-'));
          dirs.push(dir, work);
          // A name that is not UTF-8: the record keeps the path's bytes as they are.
          const target = Buffer.concat([Buffer.from(join(work, 'late-')), Buffer.from([0xff]), Buffer.from('.md')]);
          const uri = `file://${join(work, 'late-')}%FF.md`;
          const first = await serve(dir, 0);
          const { c: c1, sessionId } = await client(first.url);
          expect(await c1.request('fs/watchMissing', { watchId: 1, missing: [uri] })).toEqual({ watching: true });
          // The record holds the watch (a kill -9 before this write loses it: docs/serve.md).
          await until(() => record(dir, sessionId)?.fs?.watch?.watchId === 1, 'the watch in the record');
          await stop(first, c1, how);
          if (when === 'while no server runs') writeFileSync(target, 'new');
          const second = await serve(dir, first.port);
          const { c: c2 } = await client(second.url, sessionId);
          try {
            if (when === 'after the restart') writeFileSync(target, 'new');
            await c2.waitFor(changed(1), 10_000, true);
            // Told, the watch leaves the record: a further restart does not tell it again.
            await until(() => record(dir, sessionId) !== null && record(dir, sessionId)!.fs?.watch === undefined, 'the watch gone from the record');
            // A later watch's change comes after any second copy of the first would have.
            expect(await c2.request('fs/watchMissing', { watchId: 2, missing: [`file://${join(work, 'later')}`] })).toEqual({ watching: true });
            writeFileSync(join(work, 'later'), '');
            await c2.waitFor(changed(2), 10_000, true);
            expect(c2.frames.filter(changed(1))).toHaveLength(1);
          } finally {
            await c2.close();
            second.child.kill('SIGKILL');
          }
        },
        TEST_TIMEOUT_MS,
      );
    }

    it(
      `${how}: a file handle open across the restart is answered with an error naming the restart, then forgotten once closed`,
      async () => {
        const { dir, work, first } = await serveWithData();
        const { c: c1, sessionId } = await client(first.url);
        await c1.request('fs/open', { handleId: 'h1', path: `file://${join(work, 'data')}` });
        await until(() => record(dir, sessionId)?.fs?.handles?.includes('h1') === true, 'the handle in the record');
        await stop(first, c1, how);
        const second = await serve(dir, first.port);
        const { c: c2 } = await client(second.url, sessionId);
        try {
          const lost = await c2.call('fs/readBlock', { handleId: 'h1', offset: 0, len: 5 });
          expect(lost.error).toMatchObject({ code: -32004 });
          expect(lost.error!.message).toMatch(/^unknown file handle `h1`: it was open when the server restarted, and file handles do not survive a server restart/);
          expect((await c2.call('fs/close', { handleId: 'h1' })).result).toEqual({});
          expect((await c2.call('fs/readBlock', { handleId: 'h1', offset: 0, len: 5 })).error).toMatchObject({ code: -32004, message: 'unknown file handle `h1`' });
          // Opened again under the same id, it works.
          await c2.request('fs/open', { handleId: 'h1', path: `file://${join(work, 'data')}` });
          expect(await c2.request('fs/readBlock', { handleId: 'h1', offset: 0, len: 5 })).toMatchObject({ chunk: Buffer.from('hello').toString('base64') });
        } finally {
          await c2.close();
          second.child.kill('SIGKILL');
        }
      },
      TEST_TIMEOUT_MS,
    );
  }

  it(
    "the tether client: a handle's read after a kill -9 and restart fails at once as EBADF, saying the restart lost it",
    async () => {
      const { dir, work, first } = await serveWithData();
      const client = await ExecClient.connect(first.url, { clientName: 'restart-fs-client', recoveryDeadlineMs: 30_000 });
      try {
        const handle = await client.fs.open(join(work, 'data'));
        expect((await handle.readBlock(0, 5)).data.toString()).toBe('hello');
        await until(() => record(dir, client.sessionId)?.fs?.handles?.length === 1, 'the handle in the record');
        first.child.kill('SIGKILL');
        await first.exited;
        await serve(dir, first.port);
        const failed = await handle.readBlock(0, 5).then(
          () => null,
          (err: NodeJS.ErrnoException) => err,
        );
        expect(failed).toMatchObject({ code: 'EBADF' });
        expect(failed!.message).toMatch(/file handles do not survive a server restart/);
      } finally {
        await client.close().catch(() => {});
      }
    },
    TEST_TIMEOUT_MS,
  );
});
