/**
 * Both MCP eras through ExecStdioClientTransport and `tether mcp` (issue #26): an SDK v2
 * Client in `auto` mode (and pinned to 2026-07-28) reaches a 2026-07-28-only server, a dual
 * one and a 2025 one (server-everything, SDK v1) run by a tether server; an SDK v1 Client
 * still works. `auto` probes a custom transport in place (server/discover, then initialize
 * on the same pipe when the server is legacy).
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import path from 'node:path';
import { Client as ClientV2 } from '@modelcontextprotocol/client';
import { StdioClientTransport as StdioClientTransportV2 } from '@modelcontextprotocol/client/stdio';
import { Client as ClientV1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport as StdioClientTransportV1 } from '@modelcontextprotocol/sdk/client/stdio.js';
import { ExecStdioClientTransport } from '../../src/mcp/index.js';
import { startTetherServer, type TetherTarget } from '../helpers/tether.js';
import { everything, node, repoRoot, tetherBin, text } from '../helpers/mcp-peers.js';

let server: TetherTarget;
const cleanups: (() => Promise<void> | void)[] = [];
beforeAll(async () => {
  server = await startTetherServer({});
});
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});
afterAll(async () => {
  await server?.stop();
});

const v2Server = (mode: 'modern' | 'dual') => ({ command: node, args: [path.join(repoRoot, 'test/fixtures/mcp-v2-server.mjs'), mode] });
const servers = { modern: v2Server('modern'), dual: v2Server('dual'), everything };
type Negotiation = 'auto' | 'pin';
const negotiation = (n: Negotiation) => ({ mode: n === 'auto' ? ('auto' as const) : { pin: '2026-07-28' } });

async function v2Client(transport: Omit<ConstructorParameters<typeof ExecStdioClientTransport>[0], 'command'> | 'bridge', spec: { command: string; args: string[] }, n: Negotiation) {
  const client = new ClientV2({ name: 'era-test', version: '0.0.0' }, { versionNegotiation: negotiation(n) });
  const t = transport === 'bridge'
    ? new StdioClientTransportV2({ command: node, args: [tetherBin, 'mcp', '--url', server.url, spec.command, ...spec.args], stderr: 'pipe' })
    : new ExecStdioClientTransport({ ...transport, ...spec });
  await client.connect(t as never);
  cleanups.push(() => client.close());
  return client;
}

describe('SDK v2 Client over ExecStdioClientTransport', () => {
  it.each([
    ['modern', 'auto', '2026-07-28'],
    ['modern', 'pin', '2026-07-28'],
    ['dual', 'auto', '2026-07-28'],
    ['everything', 'auto', '2025-11-25'],
  ] as const)('%s server, %s negotiation → %s; lists, reads, gets a prompt, calls', async (which, n, version) => {
    const client = await v2Client({ url: server.url, stderr: 'pipe' }, servers[which], n);
    expect(client.getNegotiatedProtocolVersion()).toBe(version);
    const tools = (await client.listTools()).tools.map((t) => t.name);
    expect(tools).toContain('echo');
    expect(text(await client.callTool({ name: 'echo', arguments: { message: 'hi' } }))).toMatch(/Echo.*: hi$/);
    if (which !== 'everything') {
      const read = await client.readResource({ uri: 'v2://hello' });
      expect(read.contents[0]).toMatchObject({ text: expect.stringContaining('hello from') });
      const prompt = await client.getPrompt({ name: 'greet', arguments: { name: 'Ada' } });
      expect(prompt.messages[0]!.content).toMatchObject({ text: 'Hello, Ada' });
    }
  });
});

describe('SDK v1 Client over ExecStdioClientTransport (hosts still on v1)', () => {
  it('reaches a dual v2 server and server-everything in the 2025 era', async () => {
    for (const spec of [servers.dual, everything]) {
      const client = new ClientV1({ name: 'era-test-v1', version: '0.0.0' });
      await client.connect(new ExecStdioClientTransport({ url: server.url, stderr: 'pipe', ...spec }));
      cleanups.push(() => client.close());
      expect(client.getServerVersion()).toBeTruthy();
      expect(text(await client.callTool({ name: 'echo', arguments: { message: 'v1' } }))).toMatch(/Echo.*: v1$/);
    }
  });
});

describe('`tether mcp` under an SDK v2 host (its own stdio transport)', () => {
  it.each([
    ['modern', 'auto', '2026-07-28'],
    ['modern', 'pin', '2026-07-28'],
    ['everything', 'auto', '2025-11-25'],
  ] as const)('%s server, %s → %s', async (which, n, version) => {
    const client = await v2Client('bridge', servers[which], n);
    expect(client.getNegotiatedProtocolVersion()).toBe(version);
    expect(text(await client.callTool({ name: 'echo', arguments: { message: 'bridged' } }))).toMatch(/Echo.*: bridged$/);
  });

  it('an SDK v1 host still works through it', async () => {
    const client = new ClientV1({ name: 'era-test-v1', version: '0.0.0' });
    await client.connect(new StdioClientTransportV1({ command: node, args: [tetherBin, 'mcp', '--url', server.url, ...[everything.command, ...everything.args]], stderr: 'pipe' }));
    cleanups.push(() => client.close());
    expect(text(await client.callTool({ name: 'echo', arguments: { message: 'v1 host' } }))).toBe('Echo: v1 host');
  });
});

describe('`tether mcp` leaves nothing on the server when its host lets go', () => {
  // A remote server that ignores both stdin EOF and SIGTERM: only a kill (or the end of its
  // session) stops it.
  const stubborn = [node, '-e', "process.on('SIGTERM', () => {}); process.stdin.on('end', () => {}); process.stdin.resume(); setInterval(() => {}, 1000)"];
  const sessions = () => server.server.sessionCount;

  function bridge() {
    const child = spawn(node, [tetherBin, 'mcp', '--url', server.url, ...stubborn], { stdio: ['pipe', 'pipe', 'pipe'] });
    child.stderr.resume();
    child.stdout.resume();
    const exited = once(child, 'exit');
    cleanups.push(() => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    });
    return { child, exited };
  }

  it('SIGTERM, then SIGKILL 1 s later as an SDK v2 host reaps its probe sibling: the session is closed before the kill', async () => {
    const before = sessions();
    const { child, exited } = bridge();
    await expect.poll(sessions, { timeout: 10_000 }).toBe(before + 1);
    await expect.poll(() => server.server.childPids().length, { timeout: 10_000 }).toBeGreaterThan(0);
    child.kill('SIGTERM');
    const reaper = setTimeout(() => child.kill('SIGKILL'), 1000); // the host's own schedule, not a wait
    const [code, signal] = await exited;
    clearTimeout(reaper);
    expect({ code, signal }).toEqual({ code: 143, signal: null }); // exited on its own, before the SIGKILL
    expect(sessions()).toBe(before); // session/close was answered before it exited
  });

  it('stdin EOF, then SIGTERM 2 s and SIGKILL 4 s later as an SDK host closes a stdio server: done (exit 0, session closed) before the SIGTERM', async () => {
    const before = sessions();
    const { child, exited } = bridge();
    await expect.poll(sessions, { timeout: 10_000 }).toBe(before + 1);
    child.stdin.end();
    // The host's own schedule, not a wait: it only matters if tether mcp is still there.
    const host = [setTimeout(() => child.kill('SIGTERM'), 2000), setTimeout(() => child.kill('SIGKILL'), 4000)];
    const [code, signal] = await exited;
    host.forEach(clearTimeout);
    expect({ code, signal }).toEqual({ code: 0, signal: null });
    expect(sessions()).toBe(before);
  });

  it('an SDK v2 host in auto mode (probe sibling, then the session child) leaves one session while connected and none after close', async () => {
    const before = sessions();
    const client = new ClientV2({ name: 'era-test', version: '0.0.0' }, { versionNegotiation: { mode: 'auto' } });
    await client.connect(new StdioClientTransportV2({ command: node, args: [tetherBin, 'mcp', '--url', server.url, ...[everything.command, ...everything.args]], stderr: 'pipe' }));
    expect(client.getNegotiatedProtocolVersion()).toBe('2025-11-25');
    await expect.poll(sessions, { timeout: 10_000 }).toBe(before + 1); // the probe sibling's session is gone
    await client.close();
    await expect.poll(sessions, { timeout: 10_000 }).toBe(before);
  });
});
