/**
 * A watcher (extension `attach`) reads a process's unacknowledged output that went to disk:
 * `tether serve` with a state dir and a 64 KiB window, a writer that acknowledges nothing, a
 * producer of about 1.3 MB. The output past the window is spilled (session/list says so), the
 * producer finishes without pausing, and a watcher reading from seq 0 gets every byte, in
 * order, from memory and disk alike, with no gap (nothing was acknowledged).
 */
import { execSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { RawClient } from '../../helpers/raw-client.js';
import { restartablesAfterEach } from '../../helpers/restart-per-test.js';
import { serverUsers } from '../../helpers/server-process.js';

const COUNT = 200_000;
const EXPECTED = `${execSync(`seq 1 ${COUNT}`, { maxBuffer: 16 * 1024 * 1024 }).toString()}done\n`;

const restartables = restartablesAfterEach();

async function open(url: string, tether: Record<string, unknown>): Promise<{ c: RawClient; result: any }> {
  const c = await restartables.pool.connect(url);
  const result = await c.request('initialize', { clientName: 'watch-spill', tether: { version: 1, extensions: ['acks', 'sessionList', 'attach'], ...tether } });
  c.notify('initialized', {});
  return { c, result };
}

/** Reads `processId` from `afterSeq` 0 until `done\n` (long polls); every answer checked to have no gap. */
async function readAll(c: RawClient, processId: string): Promise<string> {
  let text = '';
  let afterSeq = 0;
  while (!text.endsWith('done\n')) {
    const r = await c.request('process/read', { processId, afterSeq, waitMs: 10_000 });
    expect(r.gap).toBeUndefined();
    for (const chunk of r.chunks) text += Buffer.from(chunk.chunk, 'base64').toString();
    afterSeq = r.nextSeq - 1;
  }
  return text;
}

describe.each(serverUsers())('a watcher reads spilled output (server as %s)', (user) => {
  it('gets every unacknowledged byte, in memory or on disk, from seq 0, in order', async () => {
    const server = await restartables.start(user, ['--output-window', '64KiB']);
    const writer = await open(server.url, { name: 'spiller' });
    const watcher = await open(server.url, { attach: { session: 'spiller', role: 'watcher' } });
    await writer.c.request('process/start', { processId: 'p', argv: ['sh', '-c', `seq 1 ${COUNT}; echo done; exec cat`], cwd: 'file:///tmp', env: { PATH: process.env.PATH ?? '/usr/bin:/bin' }, tty: false, pipeStdin: true });
    // The producer runs to its end though its writer acknowledges nothing (the spill takes it).
    expect(await readAll(watcher.c, 'p')).toBe(EXPECTED);
    const listed = await writer.c.request('session/list', {});
    expect(listed.sessions[0].processes[0].spilledBytes).toBeGreaterThan(0);
    // Read again from the start now that most of it is on disk: the same bytes.
    expect(await readAll(watcher.c, 'p')).toBe(EXPECTED);
  }, 60_000);
});
