/**
 * The supervisor against real local processes: server-everything killed with SIGKILL, a
 * command that exits at once, a failed server brought back by a tool call.
 */
import { once } from 'node:events';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ServerSupervisor, ServerUnavailableError, SUPERVISOR_EVENT_NAMES, type SupervisorEventName } from '../src/supervisor/index.js';
import { everything, node, text } from './helpers/mcp-peers.js';

const supervisors: ServerSupervisor[] = [];
const dirs: string[] = [];
afterEach(async () => {
  await Promise.all(supervisors.splice(0).map((s) => s.stop()));
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function watch(sup: ServerSupervisor) {
  supervisors.push(sup);
  const events: [SupervisorEventName, Record<string, unknown>][] = [];
  for (const name of SUPERVISOR_EVENT_NAMES) sup.on(name, (p: object) => events.push([name, p as Record<string, unknown>]));
  return events;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function waitDead(pid: number): Promise<void> {
  for (let i = 0; i < 100 && alive(pid); i++) await new Promise((r) => setTimeout(r, 20));
}

// Keeps real-process tests short: no health traffic, tiny backoff.
const fast = { healthIntervalMs: 0, backoff: { initialMs: 50, maxMs: 200 } };

describe('supervisor with real stdio servers', () => {
  it('server-everything killed with SIGKILL is restarted at once and usable', async () => {
    const sup = new ServerSupervisor({ name: 'everything', kind: 'stdio', ...everything }, fast);
    const events = watch(sup);
    await sup.start();
    expect(sup.status).toBe('connected');
    expect(sup.tools.map((t) => t.name)).toContain('echo');
    expect(text(await sup.callTool('echo', { message: 'before' }))).toBe('Echo: before');
    const pid = sup.pid!;
    expect(pid).toBeGreaterThan(0);

    const reconnected = once(sup, 'server_reconnected');
    process.kill(pid, 'SIGKILL');
    await reconnected;

    expect(sup.status).toBe('connected');
    expect(sup.pid).not.toBe(pid);
    expect(alive(pid)).toBe(false);
    expect(text(await sup.callTool('echo', { message: 'after' }))).toBe('Echo: after');
    expect(events.map(([n]) => n)).toEqual(['server_connected', 'tools_list_changed', 'server_disconnected', 'server_reconnecting', 'server_reconnected']);
    expect(events[2]![1]).toMatchObject({ wasIntentional: false, reason: expect.stringContaining('SIGKILL') });
    expect(events[3]![1]).toMatchObject({ attempt: 1, nextRetryMs: 0 });
    expect(events[4]![1]).toMatchObject({ attemptsTaken: 1, capabilities: expect.objectContaining({ tools: expect.any(Object) }) });
    expect(sup.detail().recentCrashes).toBe(1);

    // Stopping on purpose kills the process and says so.
    const last = sup.pid!;
    await sup.stop();
    await waitDead(last);
    expect(alive(last)).toBe(false);
    expect(sup.status).toBe('disconnected');
    expect(events.at(-1)).toEqual(['server_disconnected', expect.objectContaining({ wasIntentional: true })]);
  });

  it('a command that exits at once → failed after 3 crashes, with the exit code and stderr in lastError', async () => {
    const sup = new ServerSupervisor(
      { name: 'broken', kind: 'stdio', command: node, args: ['-e', "process.stderr.write('missing API key\\n'); process.exit(3)"] },
      fast,
    );
    const events = watch(sup);
    const failed = once(sup, 'server_failed');
    await sup.start();
    const [payload] = await failed;
    expect(sup.status).toBe('failed');
    expect(events.map(([n]) => n)).toEqual(['server_reconnecting', 'server_reconnecting', 'server_failed']);
    expect(payload.reason).toMatch(/crashed 3 times within 300 s; last: server process exited with code 3; stderr: missing API key/);
    expect(sup.summary()).toMatchObject({ status: 'failed', nextRetryMs: null, lastError: expect.stringContaining('exited with code 3') });
  });

  it('a command that does not exist fails fast instead of retrying forever', async () => {
    const sup = new ServerSupervisor({ name: 'nope', kind: 'stdio', command: '/nonexistent/mcp-server' }, fast);
    watch(sup);
    const failed = once(sup, 'server_failed');
    await sup.start();
    await failed;
    expect(sup.summary().lastError).toMatch(/ENOENT/);
  });

  it('a tool call to a failed server triggers an immediate attempt', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'tether-sup-'));
    dirs.push(dir);
    const flag = path.join(dir, 'ready');
    // Exits until the flag file exists, then runs server-everything in the same process.
    const script = `const fs = require('fs'); if (!fs.existsSync(${JSON.stringify(flag)})) { process.exit(1) } else { import(${JSON.stringify(everything.args[0])}) }`;
    const sup = new ServerSupervisor({ name: 'late', kind: 'stdio', command: node, args: ['-e', script] }, fast);
    const events = watch(sup);
    const failed = once(sup, 'server_failed');
    await sup.start();
    await failed;

    // Still broken: one attempt, an error that explains, status unchanged.
    const err = await sup.callTool('echo', { message: 'x' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ServerUnavailableError);
    expect((err as Error).message).toMatch(/'late' is unavailable: status failed, .*last error: server process exited with code 1/);
    expect(events.filter(([n]) => n === 'server_failed')).toHaveLength(1); // the probe announces nothing new

    writeFileSync(flag, '');
    expect(existsSync(flag)).toBe(true);
    const result = await sup.callTool('echo', { message: 'revived' });
    expect(text(result)).toBe('Echo: revived');
    expect(sup.status).toBe('connected');
    // Never connected before: this first success is server_connected.
    expect(events.map(([n]) => n).slice(-2)).toEqual(['server_connected', 'tools_list_changed']);
  });
});
