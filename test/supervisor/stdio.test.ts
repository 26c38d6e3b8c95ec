/**
 * The supervisor against real local processes: server-everything killed with SIGKILL, a
 * command that exits at once, a failed server brought back by a tool call.
 */
import { once } from 'node:events';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ServerSupervisor, ServerUnavailableError, SUPERVISOR_EVENT_NAMES, type SupervisorEventName } from '../../src/supervisor/index.js';
import { running, waitGone } from '../helpers/procs.js';
import { everything, node, text } from '../helpers/mcp-peers.js';

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

const alive = running;

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

  it('a start-up banner on stderr is not an error: killed later, the failure kept after the restart does not quote it', async () => {
    const script = `process.stderr.write('Knowledge Graph MCP Server running on stdio\\n'); import(${JSON.stringify(everything.args[0])})`;
    const sup = new ServerSupervisor({ name: 'banner', kind: 'stdio', command: node, args: ['-e', script] }, fast);
    const events = watch(sup);
    await sup.start();
    expect(sup.status).toBe('connected');
    const reconnected = once(sup, 'server_reconnected');
    process.kill(sup.pid!, 'SIGKILL');
    await reconnected;
    const { lastFailure, restarts, lastError } = sup.summary();
    expect(lastError).toBeNull();
    expect(restarts).toBe(1);
    expect(lastFailure).toMatchObject({ error: expect.stringContaining('SIGKILL'), recoveredAt: expect.any(String) });
    expect(lastFailure!.error).not.toContain('Knowledge Graph');
    expect(JSON.stringify(events)).not.toContain('Knowledge Graph');
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

/** Pids a test's shell script wrote, one per line. */
function pidsIn(file: string): number[] {
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8').split('\n').filter(Boolean).map(Number);
}

describe('supervisor: what a failed stdio server leaves and says (issue 15)', () => {
  it('a server that prints a non-JSON line then hangs: each abandoned attempt kills its whole process group, and lastError says why', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'tether-sup-nonjson-'));
    dirs.push(dir);
    const pids = path.join(dir, 'pids');
    // A wrapper that logs to stdout and starts its real work as a child (as npx, sh -c do).
    const script = `echo "Starting server on stdio..."; sleep 300 & echo $! >> ${pids}; wait`;
    const logs: string[] = [];
    const sup = new ServerSupervisor(
      { name: 'chatty', kind: 'stdio', command: 'sh', args: ['-c', script] },
      { ...fast, connectTimeoutMs: 600, maxRetries: 1, logger: (_level, msg) => logs.push(msg) },
    );
    watch(sup);
    expect(sup.summary().health).toBe('unknown');
    await sup.start();
    const failed = sup.status === 'failed' ? Promise.resolve() : once(sup, 'server_failed');
    await failed;
    expect(sup.summary().health).toBe('unknown'); // never connected, never checked
    expect(sup.summary().lastError).toMatch(/timed out after 600 ms; the server wrote non-JSON to stdout, where MCP allows only JSON-RPC messages .*"Starting server on stdio\.\.\."/);
    expect(logs.find((l) => /attempt \d+ failed/.test(l))).toMatch(/attempt 1 failed/);
    const children = pidsIn(pids);
    // One child per attempt (2), unless a loaded machine killed a shell before it wrote its line.
    expect(children.length).toBeGreaterThan(0);
    expect(await waitGone(children)).toEqual([]);
  });

  it('a Node server that throws at start: lastError carries the error, not the "Node.js v20" trailer', async () => {
    const sup = new ServerSupervisor(
      { name: 'thrower', kind: 'stdio', command: node, args: ['-e', "const key = process.env.NOPE; if (!key) throw new Error('NOPE_API_KEY is not set');"] },
      { ...fast, crashLimit: 1 },
    );
    watch(sup);
    await sup.start();
    expect(sup.status).toBe('failed');
    const lastError = sup.summary().lastError!;
    expect(lastError).toMatch(/^server process exited with code 1; stderr: Error: NOPE_API_KEY is not set/);
    expect(lastError).not.toMatch(/Node\.js v\d/);
  });

  it('stop() is bounded when the server ignores stdin EOF and SIGTERM: its group is killed', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'tether-sup-stubborn-'));
    dirs.push(dir);
    const pids = path.join(dir, 'pids');
    // Answers initialize (a real MCP server), ignores SIGTERM, and has a child that does too.
    const server = path.join(dir, 'stubborn.mjs');
    writeFileSync(
      server,
      `import { spawn } from 'node:child_process';
       import { appendFileSync } from 'node:fs';
       process.on('SIGTERM', () => {});
       process.stdin.on('end', () => {});
       const child = spawn('sh', ['-c', 'trap "" TERM; sleep 300 & wait'], { stdio: 'ignore' });
       appendFileSync(${JSON.stringify(pids)}, process.pid + '\\n' + child.pid + '\\n');
       const { McpServer } = await import(${JSON.stringify(path.join(process.cwd(), 'node_modules/@modelcontextprotocol/sdk/dist/esm/server/mcp.js'))});
       const { StdioServerTransport } = await import(${JSON.stringify(path.join(process.cwd(), 'node_modules/@modelcontextprotocol/sdk/dist/esm/server/stdio.js'))});
       await new McpServer({ name: 'stubborn', version: '1' }).connect(new StdioServerTransport());
       setInterval(() => {}, 1000);`,
    );
    const sup = new ServerSupervisor({ name: 'stubborn', kind: 'stdio', command: node, args: [server] }, fast);
    await sup.start();
    expect(sup.status).toBe('connected');
    const started = Date.now();
    await sup.stop();
    expect(Date.now() - started).toBeLessThan(5000);
    const children = pidsIn(pids);
    expect(children).toHaveLength(2);
    expect(await waitGone(children)).toEqual([]);
  });
});
