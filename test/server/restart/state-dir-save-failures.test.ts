/**
 * A session record that cannot be saved is an error the operator sees (kept-server.ts,
 * session-store.ts): logged at error, and counted in `/metrics` as
 * `tether_state_dir_save_failures_total`, never a stale record kept silently. Here the
 * records' directory is replaced by a file under a running server (as a full or broken disk
 * would fail the writes): every save fails, at creation and after.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ExecClient } from '../../../src/client/index.js';
import { startServer, type TetherServer } from '../../../src/server/index.js';

const dirs: string[] = [];
const servers: TetherServer[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await s.close({ keep: false });
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

async function failures(url: string): Promise<number> {
  const text = await (await fetch(`${url.replace(/^ws/, 'http')}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith('tether_state_dir_save_failures_total '));
  return Number(line?.split(' ')[1]);
}

describe('session records that cannot be saved', () => {
  it('are logged at error and counted in /metrics', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tether-sf-'));
    dirs.push(dir);
    const logs: string[] = [];
    const server = await startServer({ port: 0, stateDir: dir, adoptWithinMs: 60_000, logger: (level, message) => logs.push(`${level} ${message}`) });
    servers.push(server);
    expect(await failures(server.url)).toBe(0);
    rmSync(join(dir, 'sessions'), { recursive: true });
    writeFileSync(join(dir, 'sessions'), 'not a directory');
    const client = await ExecClient.connect(server.url, { clientName: 'save-failures' });
    try {
      const proc = client.spawn(['sh', '-c', 'echo hi']);
      await proc.closed;
      // At creation (synchronous) and at the process's start (coalesced, asynchronous).
      for (let i = 0; i < 200 && (await failures(server.url)) < 2; i++) await new Promise((r) => setImmediate(r));
      expect(await failures(server.url)).toBeGreaterThanOrEqual(2);
      expect(logs.filter((l) => /^error state dir: could not (write|save) session record/.test(l)).length).toBeGreaterThanOrEqual(2);
    } finally {
      await client.close();
    }
  });
});
