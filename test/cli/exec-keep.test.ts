/**
 * `tether exec --keep DURATION` end to end: the real CLI asks the server to keep its session
 * that long after a drop (extension `sessionKeep`); the server's `session/list` (here `tether
 * ps --json`, run as the remote command itself) shows the grant, and a keep past the server's
 * --max-session-ttl is cut to it with one warning line on stderr.
 */
import { spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTetherServer, type TetherTarget } from '../helpers/tether.js';

let target: TetherTarget;

beforeAll(async () => {
  target = await startTetherServer({ sessionTtlMs: 1000, maxSessionTtlMs: 600_000 });
});

afterAll(async () => {
  await target?.stop();
});

function tether(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['bin/tether.js', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/** `tether ps --json` run on the server by `tether exec`: the list as the exec's own session sees it. */
const psFromInside = (): string[] => [process.execPath, 'bin/tether.js', 'ps', '--url', target.url, '--json'];

describe('tether exec --keep', () => {
  it('reaches the server: session/list shows the keep granted to the exec session', async () => {
    const run = await tether(['exec', '--url', target.url, '--keep', '5m', '--', ...psFromInside()]);
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    const listed = JSON.parse(run.stdout) as { sessions: Array<{ clientName: string; keepMs?: number }> };
    expect(listed.sessions.find((s) => s.clientName === 'tether-exec')?.keepMs).toBe(300_000);
  });

  it('without --keep the session keeps the server’s --session-ttl', async () => {
    const run = await tether(['exec', '--url', target.url, '--', ...psFromInside()]);
    expect(run.code).toBe(0);
    const listed = JSON.parse(run.stdout) as { sessions: Array<{ clientName: string; keepMs?: number }> };
    expect(listed.sessions.find((s) => s.clientName === 'tether-exec')?.keepMs).toBe(1000);
  });

  it('asking past --max-session-ttl: granted the maximum, one warning line on stderr', async () => {
    const run = await tether(['exec', '--url', target.url, '--keep', '2h', '--', ...psFromInside()]);
    expect(run.code).toBe(0);
    expect(run.stderr).toBe('tether exec: --keep 2h: the server keeps this session 10m after a drop, its most (--max-session-ttl)\n');
    const listed = JSON.parse(run.stdout) as { sessions: Array<{ clientName: string; keepMs?: number }> };
    expect(listed.sessions.find((s) => s.clientName === 'tether-exec')?.keepMs).toBe(600_000);
  });

  it('refuses a --keep without a unit, as every duration', async () => {
    const run = await tether(['exec', '--url', target.url, '--keep', '8', 'true']);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/--keep: '8' needs a unit/);
  });
});
