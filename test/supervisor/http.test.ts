/**
 * The supervisor against a real Streamable HTTP MCP server (SDK McpServer on 127.0.0.1) that
 * answers 401, goes down, comes back with its sessions lost.
 */
import { once } from 'node:events';
import { afterEach, describe, expect, it } from 'vitest';
import { ServerSupervisor, ServerUnavailableError, SUPERVISOR_EVENT_NAMES, type SupervisorEventName } from '../../src/supervisor/index.js';
import { startHttpMcpBackend, type HttpMcpBackend } from '../helpers/http-mcp-backend.js';
import { text } from '../helpers/mcp-peers.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function backend(opts?: Parameters<typeof startHttpMcpBackend>[0]): Promise<HttpMcpBackend> {
  const b = await startHttpMcpBackend(opts);
  cleanups.push(() => b.close());
  return b;
}

function supervise(url: string, options: ConstructorParameters<typeof ServerSupervisor>[1] = {}, headers?: Record<string, string>) {
  const sup = new ServerSupervisor({ name: 'remote', kind: 'http', url, headers }, { healthIntervalMs: 0, backoff: { initialMs: 50, maxMs: 400 }, ...options });
  cleanups.push(() => sup.stop());
  const events: [SupervisorEventName, Record<string, unknown>][] = [];
  for (const name of SUPERVISOR_EVENT_NAMES) sup.on(name, (p: object) => events.push([name, p as Record<string, unknown>]));
  return { sup, events, names: () => events.map(([n]) => n) };
}

describe('supervisor with a real Streamable HTTP server', () => {
  it('connects, lists tools and forwards calls, sending the configured headers', async () => {
    const b = await backend({ requireHeader: ['authorization', 'Bearer good'] });
    const { sup } = supervise(b.url, {}, { authorization: 'Bearer good' });
    await sup.start();
    expect(sup.status).toBe('connected');
    expect(sup.tools.map((t) => t.name).sort()).toEqual(['add', 'generation']);
    expect(text(await sup.callTool('add', { a: 2, b: 3 }))).toBe('5');
  });

  it('401 → requires_reauth and no retries', async () => {
    const b = await backend();
    b.setMode('unauthorized');
    const { sup, names, events } = supervise(b.url);
    await sup.start();
    expect(sup.status).toBe('requires_reauth');
    expect(names()).toEqual(['server_failed']);
    expect(events[0]![1]).toMatchObject({ status: 'requires_reauth', reason: expect.stringContaining('HTTP 401') });
    const seen = b.requests;
    const err = await sup.callTool('add', { a: 1, b: 1 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ServerUnavailableError);
    // No retry is scheduled (every retry goes through one timer, which the error reports):
    // nothing will ask again until someone calls retry().
    expect((err as ServerUnavailableError).nextRetryMs).toBeNull();
    expect(names()).toEqual(['server_failed']);
    expect(b.requests).toBe(seen);

    // Credentials fixed on the server side: a manual retry connects.
    b.setMode('ok');
    expect((await sup.retry()).status).toBe('connected');
  });

  it('credentials revoked mid-session (401 on a call) → requires_reauth, the call says so, no retries', async () => {
    const b = await backend();
    const { sup, names, events } = supervise(b.url);
    await sup.start();
    b.setMode('unauthorized');
    const err = await sup.callTool('add', { a: 1, b: 1 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ServerUnavailableError);
    expect((err as Error).message).toMatch(/status requires_reauth, .*last error: HTTP 401/);
    expect(sup.status).toBe('requires_reauth');
    expect(names().slice(-2)).toEqual(['server_disconnected', 'server_failed']);
    expect(events.at(-1)![1]).toMatchObject({ status: 'requires_reauth' });
    // No retry is scheduled: the error reports no next retry, and none was announced.
    expect((err as ServerUnavailableError).nextRetryMs).toBeNull();
    expect(names()).not.toContain('server_reconnecting');
  });

  it('wrong credentials (missing header) are also requires_reauth, and 403 too', async () => {
    const b = await backend({ requireHeader: ['authorization', 'Bearer good'] });
    const { sup } = supervise(b.url, {}, { authorization: 'Bearer stale' });
    await sup.start();
    expect(sup.status).toBe('requires_reauth');
    const b2 = await backend();
    b2.setMode('forbidden');
    const { sup: sup2 } = supervise(b2.url);
    await sup2.start();
    expect(sup2.status).toBe('requires_reauth');
  });

  it('server down → a call fails with the status → reconnecting; back up → reconnected with fresh tools', async () => {
    const b = await backend();
    const { sup, names, events } = supervise(b.url);
    await sup.start();
    expect(text(await sup.callTool('generation', {}))).toBe('1');

    await b.stop();
    const err = await sup.callTool('add', { a: 1, b: 2 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ServerUnavailableError);
    expect((err as Error).message).toMatch(/'remote' is unavailable: status reconnecting, attempt \d+, next retry in [\d.]+ s, last error: /);
    expect(sup.status).toBe('reconnecting');
    expect(names().slice(0, 4)).toEqual(['server_connected', 'tools_list_changed', 'server_disconnected', 'server_reconnecting']);

    b.setExtraTools(['brand_new']);
    const reconnected = once(sup, 'server_reconnected');
    await b.restart();
    await reconnected;
    expect(sup.status).toBe('connected');
    expect(text(await sup.callTool('generation', {}))).toBe('2');
    expect(sup.tools.map((t) => t.name)).toContain('brand_new');
    const tail = names().slice(names().lastIndexOf('server_reconnected'));
    expect(tail).toEqual(['server_reconnected', 'tools_list_changed']);
    const retries = events.filter(([n]) => n === 'server_reconnecting').map(([, p]) => p.attempt);
    expect(retries).toEqual(retries.map((_, i) => i + 1)); // 1, 2, 3… in order
  });

  it('a restarted server (session lost) is noticed on the event stream → reconnected', async () => {
    const b = await backend();
    const { sup, names } = supervise(b.url);
    await sup.start();
    const reconnected = once(sup, 'server_reconnected');
    await b.restart();
    await reconnected;
    expect(text(await sup.callTool('generation', {}))).toBe('2');
    expect(names()).toEqual(['server_connected', 'tools_list_changed', 'server_disconnected', 'server_reconnecting', 'server_reconnected']);
  });

  it('a call answered 404 (session unknown) costs the caller nothing: reconnect and one resend', async () => {
    const b = await backend();
    const { sup, names } = supervise(b.url);
    await sup.start();
    b.forgetSessions();
    expect(text(await sup.callTool('add', { a: 1, b: 2 }))).toBe('3');
    expect(names()).toEqual(['server_connected', 'tools_list_changed', 'server_disconnected', 'server_reconnecting', 'server_reconnected']);
    expect(sup.summary()).toMatchObject({ status: 'connected', attempt: 0 });
  });

  it('force reconnect gives a connected server a new session', async () => {
    const b = await backend();
    const { sup, names } = supervise(b.url);
    await sup.start();
    const detail = await sup.retry();
    expect(detail.status).toBe('connected');
    expect(names()).toEqual(['server_connected', 'tools_list_changed', 'server_disconnected', 'server_reconnecting', 'server_reconnected']);
    expect(text(await sup.callTool('add', { a: 20, b: 22 }))).toBe('42');
  });

  it('a call that the server never answers fails after the timeout instead of hanging', async () => {
    const b = await backend();
    const { sup } = supervise(b.url, { requestTimeoutMs: 300 });
    await sup.start();
    b.setMode('hang');
    const err = await sup.callTool('add', { a: 1, b: 1 }).catch((e: unknown) => e);
    expect((err as Error).message).toMatch(/timed out/i);
    // A slow answer is not a lost connection.
    expect(sup.status).toBe('connected');
  });
});
