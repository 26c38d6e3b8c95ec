/**
 * The gateway hears what a stopping tether server says (issue #27): a supervised exec-backed
 * MCP server whose tether server closes with 1012 "restarting" is `restarting` (not failed,
 * no backoff: the link reconnects at once) and the gateway logs the same line `tether exec`
 * prints; one whose server stops (1001 "stopped") is a loss whose reason is the true one,
 * "server stopped; process killed". The supervisor's backoff is 60 s: a reconnect that
 * waited it out would time the test out, so nothing is measured by the clock.
 */
import { once } from 'node:events';
import { afterEach, describe, expect, it } from 'vitest';
import { ServerSupervisor, type ExecServerSpec, type ServerSummary } from '../../src/supervisor/index.js';
import type { Connection } from '../../src/server/connection/connection.js';
import { restartingReason } from '../../src/protocol/close-reasons.js';
import { restartingLine, SERVER_STOPPED_LINE } from '../../src/util/stop-notices.js';
import { everything, text } from '../helpers/mcp-peers.js';
import { startTetherServer, type TetherTarget } from '../helpers/tether.js';
import { serverInternals } from '../../src/server/server.js';

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function tether(): Promise<TetherTarget> {
  const t = await startTetherServer();
  cleanups.push(() => t.stop());
  return t;
}

function supervise(url: string) {
  const logs: string[] = [];
  const spec: ExecServerSpec = { name: 'remote', kind: 'exec', ...everything, tether: { url, recoveryDeadlineMs: 60_000 } };
  const sup = new ServerSupervisor(spec, {
    healthIntervalMs: 0,
    backoff: { initialMs: 60_000, maxMs: 60_000 },
    connectTimeoutMs: 15_000,
    logger: (level, msg) => logs.push(`${level} ${msg}`),
  });
  cleanups.push(() => sup.stop());
  const statuses: string[] = [];
  sup.on('status', (e) => statuses.push(e.status));
  const reconnecting: unknown[] = [];
  sup.on('server_reconnecting', (e) => reconnecting.push(e));
  return { sup, logs, statuses, reconnecting };
}

describe('gateway: a tether server that restarts (1012)', () => {
  it('the server is "restarting" (not failed, no backoff), the gateway logs the restart line, and the session resumes', async () => {
    const target = await tether();
    const connections: Connection[] = [];
    serverInternals(target.server).onConnection((conn) => connections.push(conn));
    const { sup, logs, statuses, reconnecting } = supervise(target.url);
    await sup.start();
    expect(sup.status).toBe('connected');
    expect(text(await sup.callTool('echo', { message: 'one' }))).toBe('Echo: one');

    // What the status JSON says while restarting, taken as the status changes.
    let during: ServerSummary | undefined;
    sup.on('status', (e) => {
      if (e.status === 'restarting') during = sup.summary();
    });
    const reconnected = once(sup, 'server_reconnected');
    connections[0]!.ws.close(1012, restartingReason(30_000));
    await reconnected;

    expect(during).toMatchObject({ status: 'restarting', nextRetryMs: null, reason: null, lastError: restartingLine(30_000) });
    expect(statuses).toEqual(['connecting', 'connected', 'restarting', 'connected']);
    expect(reconnecting).toEqual([]); // no backoff was scheduled
    expect(logs).toContain(`warn [remote] ${restartingLine(30_000)}`);
    expect(sup.status).toBe('connected');
    expect(sup.summary().lastFailure?.recoveredAt).not.toBeNull();
    expect(text(await sup.callTool('echo', { message: 'two' }))).toBe('Echo: two');
  }, 20_000);
});

describe('gateway: a tether server that stops (1001)', () => {
  it('the loss is reported with the true reason: "server stopped; process killed"', async () => {
    const target = await tether();
    const { sup, statuses } = supervise(target.url);
    await sup.start();
    expect(sup.status).toBe('connected');
    const disconnected = once(sup, 'server_disconnected');
    await target.stop(); // the library default keeps nothing: close 1001 "stopped", processes killed
    const [event] = (await disconnected) as [{ reason?: string }];
    expect(event.reason).toContain(SERVER_STOPPED_LINE);
    const summary = sup.summary();
    expect(summary.lastError).toContain(SERVER_STOPPED_LINE);
    expect(summary.lastFailure?.error).toContain(SERVER_STOPPED_LINE);
    expect(statuses).not.toContain('restarting');
  }, 20_000);
});
