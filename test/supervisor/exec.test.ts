/**
 * exec kind: server-everything running on a tether server through ExecStdioClientTransport.
 * The tether server restarted (session lost) is a loss → reconnecting → connected with fresh
 * tools; the remote MCP server killed is a crash → restarted at once; a refused token is
 * requires_reauth.
 */
import { once } from 'node:events';
import net from 'node:net';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ServerSupervisor, SUPERVISOR_EVENT_NAMES, type ExecServerSpec, type SupervisorEventName } from '../../src/supervisor/index.js';
import { everything, text } from '../helpers/mcp-peers.js';
import { startTetherServer, type TetherTarget } from '../helpers/tether.js';
import { ChaosProxy } from '../../src/chaos/proxy.js';
import { serverDiesSilently } from '../helpers/silent-death.js';

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function tether(opts: Parameters<typeof startTetherServer>[0] = {}): Promise<TetherTarget> {
  const t = await startTetherServer(opts);
  cleanups.push(() => t.stop());
  return t;
}

function supervise(spec: Omit<ExecServerSpec, 'name' | 'kind' | 'command' | 'args'>) {
  const sup = new ServerSupervisor(
    { name: 'remote', kind: 'exec', ...everything, ...spec },
    { healthIntervalMs: 0, backoff: { initialMs: 50, maxMs: 400 }, connectTimeoutMs: 15_000 },
  );
  cleanups.push(() => sup.stop());
  const events: [SupervisorEventName, Record<string, unknown>][] = [];
  for (const name of SUPERVISOR_EVENT_NAMES) sup.on(name, (p: object) => events.push([name, p as Record<string, unknown>]));
  return { sup, events, names: () => events.map(([n]) => n) };
}

describe('supervisor, exec kind (through a tether server)', () => {
  it('tether server restarted (session lost) → reconnecting → connected with fresh tools', async () => {
    const first = await tether();
    const port = first.server.port;
    const { sup, events, names } = supervise({ tether: { url: first.url, recoveryDeadlineMs: 10_000 } });
    await sup.start();
    expect(sup.status).toBe('connected');
    expect(text(await sup.callTool('echo', { message: 'one' }))).toBe('Echo: one');

    const reconnected = once(sup, 'server_reconnected');
    await first.stop(); // kills the remote server-everything with the session
    await tether({ port });
    await reconnected;

    expect(sup.status).toBe('connected');
    expect(sup.tools.map((t) => t.name)).toContain('echo');
    expect(text(await sup.callTool('echo', { message: 'two' }))).toBe('Echo: two');
    const order = names();
    expect(order.slice(0, 3)).toEqual(['server_connected', 'tools_list_changed', 'server_disconnected']);
    expect(order.at(-1)).toBe('server_reconnected');
    expect(order.slice(3, -1).every((n) => n === 'server_reconnecting')).toBe(true);
    // A lost session is a loss (backoff), not a crash of the MCP server.
    expect(sup.detail().recentCrashes).toBe(0);
    expect(events[2]![1]).toMatchObject({ wasIntentional: false });
    await sup.stop(); // before the tether server it runs on
  });

  it('short link drops are tether\'s job: the supervisor stays connected, calls succeed, no events', async () => {
    const t = await tether();
    const proxy = await ChaosProxy.start({ targetPort: t.server.port });
    cleanups.push(() => proxy.close());
    const { sup, names } = supervise({ tether: { url: proxy.url, recoveryDeadlineMs: 10_000 } });
    await sup.start();
    const before = names().length;
    for (let i = 0; i < 5; i++) {
      expect(proxy.cutAll()).toBeGreaterThan(0);
      expect(text(await sup.callTool('echo', { message: `drop ${i}` }))).toBe(`Echo: drop ${i}`);
    }
    expect(sup.status).toBe('connected');
    expect(names().length).toBe(before);
    expect(t.server.childPids()).toHaveLength(1); // the same remote server all along
  });

  it('the remote MCP server killed → crash → restarted at once', async () => {
    const t = await tether();
    const { sup, names } = supervise({ tether: { url: t.url } });
    await sup.start();
    const [pid] = t.server.childPids();
    expect(pid).toBeGreaterThan(0);
    const reconnected = once(sup, 'server_reconnected');
    process.kill(pid!, 'SIGKILL');
    await reconnected;
    expect(names().slice(-3)).toEqual(['server_disconnected', 'server_reconnecting', 'server_reconnected']);
    expect(sup.detail().recentCrashes).toBe(1);
    expect(() => process.kill(pid!, 0)).toThrow(); // the old process is gone
    expect(text(await sup.callTool('echo', { message: 'back' }))).toBe('Echo: back');
  });

  it('tether server not up yet → backoff, connects when it appears', async () => {
    const probe = await startTetherServer({});
    const port = probe.server.port;
    await probe.stop();
    const { sup, names } = supervise({ tether: { url: `ws://127.0.0.1:${port}`, recoveryDeadlineMs: 2000 } });
    await sup.start();
    expect(sup.status).toBe('reconnecting');
    expect(sup.summary().lastError).toMatch(/ECONNREFUSED|refused|reach/i);
    const connected = once(sup, 'server_connected');
    await tether({ port });
    await connected;
    expect(names()[0]).toBe('server_reconnecting');
    expect(sup.detail().recentCrashes).toBe(0);
  });

  it('a refused token (tokenFile) → requires_reauth; fixing the file and retrying connects', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'tether-gw-token-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const tokenFile = path.join(dir, 'token');
    writeFileSync(tokenFile, 'wrong\n');
    const t = await tether({ token: 's3cret' });
    const { sup, names } = supervise({ tether: { url: t.url, tokenFile } });
    await sup.start();
    expect(sup.status).toBe('requires_reauth');
    expect(names()).toEqual(['server_failed']);
    writeFileSync(tokenFile, 's3cret\n'); // read again on every attempt
    expect((await sup.retry()).status).toBe('connected');
  });

  it('an unreadable tokenFile is requires_reauth, naming the file', async () => {
    const t = await tether({ token: 's3cret' });
    const { sup } = supervise({ tether: { url: t.url, tokenFile: '/nonexistent/token' } });
    await sup.start();
    expect(sup.summary()).toMatchObject({ status: 'requires_reauth', lastError: expect.stringContaining('/nonexistent/token') });
  });
});

/** A TCP relay on a fixed port in front of a tether server, that can stop listening (an ssh tunnel that goes down and comes back). */
async function relay(targetPort: number): Promise<{ url: string; down(): Promise<void>; up(): Promise<void>; close(): Promise<void> }> {
  const sockets = new Set<net.Socket>();
  let server: net.Server | undefined;
  let port = 0;
  const listen = async () => {
    server = net.createServer((client) => {
      const upstream = net.connect(targetPort, '127.0.0.1');
      for (const s of [client, upstream]) {
        sockets.add(s);
        s.on('close', () => sockets.delete(s));
        s.on('error', () => {});
      }
      client.pipe(upstream).pipe(client);
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
    });
    await new Promise<void>((resolve) => server!.listen(port, '127.0.0.1', resolve));
    port = (server!.address() as net.AddressInfo).port;
  };
  const down = async () => {
    const s = server;
    server = undefined;
    for (const socket of sockets) socket.destroy();
    if (s) await new Promise<void>((resolve) => s.close(() => resolve()));
  };
  await listen();
  return { url: `ws://127.0.0.1:${port}`, down, up: listen, close: down };
}

describe('supervisor, exec kind: status true within a second (issue 15)', () => {
  it('the tether server refuses connections → reconnecting at once, calls fail fast saying so; it listens again → the same session resumes', async () => {
    const t = await tether();
    const tunnel = await relay(t.server.port);
    cleanups.push(() => tunnel.close());
    const { sup, names } = supervise({ tether: { url: tunnel.url, recoveryDeadlineMs: 20_000 } });
    await sup.start();
    expect(sup.status).toBe('connected');
    const [remotePid] = t.server.childPids();

    const down = Date.now();
    const disconnected = once(sup, 'server_disconnected');
    await tunnel.down();
    await disconnected;
    expect(Date.now() - down).toBeLessThan(1000);
    expect(sup.summary()).toMatchObject({ status: 'reconnecting', lastError: expect.stringMatching(/refuses connections \(.*ECONNREFUSED.*\); the session is kept/) });

    const callStarted = Date.now();
    const err = await sup.callTool('echo', { message: 'x' }).catch((e: unknown) => e);
    expect(Date.now() - callStarted).toBeLessThan(1000);
    expect((err as Error).message).toMatch(/MCP server 'remote' is unavailable: status reconnecting, attempt \d+, .*ECONNREFUSED/);

    const reconnected = once(sup, 'server_reconnected');
    await tunnel.up();
    await reconnected;
    expect(sup.status).toBe('connected');
    expect(t.server.childPids()).toEqual([remotePid]); // the same remote server: the session resumed
    expect(text(await sup.callTool('echo', { message: 'back' }))).toBe('Echo: back');
    expect(names().slice(-2)).toEqual(['server_disconnected', 'server_reconnected']);
  });

  it('the tether server killed: reconnecting within a second, then the lost session is a loss and a new one connects', async () => {
    const first = await tether();
    const port = first.server.port;
    const { sup } = supervise({ tether: { url: first.url, recoveryDeadlineMs: 20_000 } });
    await sup.start();
    const stopped = Date.now();
    const disconnected = once(sup, 'server_disconnected');
    await first.stop();
    await disconnected;
    expect(Date.now() - stopped).toBeLessThan(1000);
    expect(sup.status).toBe('reconnecting');
    const reconnected = once(sup, 'server_reconnected');
    await tether({ port });
    await reconnected; // "unknown session id" → a new session and a new server process
    expect(text(await sup.callTool('echo', { message: 'new session' }))).toBe('Echo: new session');
  });

  it('a remote command that does not exist is a crash: failed after 3 attempts, with the server\'s reason', async () => {
    const t = await tether();
    const sup = new ServerSupervisor(
      { name: 'missing', kind: 'exec', command: 'no-such-mcp-server-xyz', tether: { url: t.url } },
      { healthIntervalMs: 0, backoff: { initialMs: 50, maxMs: 400 } },
    );
    cleanups.push(() => sup.stop());
    const failed = once(sup, 'server_failed');
    await sup.start();
    await failed;
    expect(sup.status).toBe('failed');
    expect(sup.detail().recentCrashes).toBe(3);
    expect(sup.summary().lastError).toBe("the tether server cannot start 'no-such-mcp-server-xyz': No such file or directory (os error 2)");
  });

  it('behind a plain TCP proxy (tether chaos, no fault), the tether server dies silently: not connected within 3 s, whatever the recovery deadline', async () => {
    const t = await tether();
    const proxy = await ChaosProxy.start({ targetPort: t.server.port });
    cleanups.push(() => proxy.close());
    const { sup } = supervise({ tether: { url: proxy.url, recoveryDeadlineMs: 60_000 } });
    await sup.start();
    expect(sup.status).toBe('connected');
    const left = new Promise<string>((resolve) => sup.on('status', ({ status }) => { if (status !== 'connected') resolve(status); }));
    await serverDiesSilently(proxy);
    // Bounded by an event, not a sleep; before, it stayed connected until the recovery deadline.
    const status = await Promise.race([left, new Promise<string>((resolve) => setTimeout(() => resolve('still connected after 3 s'), 3000).unref())]);
    expect(status).toBe('reconnecting');
    expect(sup.summary()).toMatchObject({ status: 'reconnecting', health: 'unknown', lastError: expect.stringMatching(/^the tether (server cannot be reached|link has been down)/) });
    await sup.stop();
  });

  it('a black hole behind a proxy (the socket stays open, nothing comes back) is seen by the 2 s keepalive: not connected within 4 s', async () => {
    const t = await tether();
    const proxy = await ChaosProxy.start({ targetPort: t.server.port });
    cleanups.push(() => proxy.close());
    const { sup } = supervise({ tether: { url: proxy.url, recoveryDeadlineMs: 60_000 } });
    await sup.start();
    const left = new Promise<string>((resolve) => sup.on('status', ({ status }) => { if (status !== 'connected') resolve(status); }));
    proxy.blackhole(true);
    const status = await Promise.race([left, new Promise<string>((resolve) => setTimeout(() => resolve('still connected after 4 s'), 4000).unref())]);
    expect(status).toBe('reconnecting');
    proxy.blackhole(false);
    await sup.stop();
  });
});
