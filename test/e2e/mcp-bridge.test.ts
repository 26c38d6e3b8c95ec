/**
 * The `tether mcp` bridge, driven the way an MCP host drives it: an SDK Client spawns
 * `node bin/tether.js mcp --url … -- <server>` with the SDK's own StdioClientTransport.
 * The chaos proxy sits between the bridge and the tether server.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { startTetherServer, type TetherTarget } from '../helpers/tether.js';
import { ChaosProxy } from '../../src/chaos/proxy.js';
import type { Target } from '../helpers/target.js';
import { everything, memoryServer, node, repoRoot, tetherBin, text } from '../helpers/mcp-peers.js';
import { makeFifo, untilHeldBack } from '../helpers/fifo.js';
import { running } from '../helpers/procs.js';
import { EXIT_SESSION_LOST } from '../../src/mcp/index.js';
import { parseMcpArgs } from '../../src/cli/mcp.js';

let server: TetherTarget;
let proxy: ChaosProxy;
const cleanups: (() => Promise<void> | void)[] = [];

beforeAll(async () => {
  server = await startTetherServer({});
  proxy = await ChaosProxy.inFrontOf(server.url);
});
afterEach(async () => {
  proxy?.heal();
  for (const c of cleanups.splice(0).reverse()) await c();
  // Whatever a test started on the server is gone once its clients are closed: no orphans.
  // (childPids() also lists exited processes kept readable for a while: check liveness.)
  await expect.poll(() => server.server.childPids().filter(isAlive), { timeout: 10_000 }).toEqual([]);
});
afterAll(async () => {
  await proxy?.close();
  await server?.stop();
});

function bridgeArgs(url: string, remote: { command: string; args: string[]; env?: Record<string, string> }): string[] {
  const env = Object.entries(remote.env ?? {}).flatMap(([k, v]) => ['--env', `${k}=${v}`]);
  return [tetherBin, 'mcp', '--url', url, ...env, '--', remote.command, ...remote.args];
}

async function hostThroughBridge(remote: { command: string; args: string[]; env?: Record<string, string> }) {
  const transport = new StdioClientTransport({ command: node, args: bridgeArgs(proxy.url, remote), cwd: repoRoot, stderr: 'pipe' });
  const stderr: string[] = [];
  transport.stderr!.on('data', (d: Buffer) => stderr.push(d.toString()));
  const client = new Client({ name: 'mcp-host', version: '0.0.0' });
  const errors: Error[] = [];
  let closes = 0;
  client.onerror = (e) => errors.push(e);
  client.onclose = () => closes++;
  await client.connect(transport);
  cleanups.push(() => client.close());
  return { client, errors, stderr, closes: () => closes };
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Runs the bridge as a plain child, for exit codes and stdout purity. */
function runBridgeProcess(args: string[], input?: string) {
  const child = spawn(node, [tetherBin, 'mcp', ...args], { cwd: repoRoot, stdio: ['pipe', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  if (input !== undefined) child.stdin.end(input);
  const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  cleanups.push(() => {
    if (child.exitCode === null) child.kill('SIGKILL');
  });
  return { child, exited, out: () => stdout, err: () => stderr };
}

/**
 * The host's own SDK reports a progress notification that it read in the same chunk as the
 * result, after the result, as an "unknown token" (it dispatches notifications a microtask
 * late); it does so with any local stdio server too. Everything else is a real error.
 */
function hostErrors(errors: Error[]): Error[] {
  return errors.filter((e) => !/Received a progress notification for an unknown token/.test(e.message));
}

const initialize = JSON.stringify({
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '0' } },
});

describe('tether mcp bridge', () => {
  it('serves a remote server-everything to an SDK host: tools, progress, resources, prompts', async () => {
    const h = await hostThroughBridge(everything);
    expect(h.client.getServerVersion()?.name).toBe('mcp-servers/everything');
    expect((await h.client.listTools()).tools.map((t) => t.name)).toContain('echo');
    expect(text(await h.client.callTool({ name: 'echo', arguments: { message: 'via bridge' } }))).toBe('Echo: via bridge');
    expect(text(await h.client.callTool({ name: 'get-sum', arguments: { a: 1, b: 2 } }))).toBe('The sum of 1 and 2 is 3.');
    const progress: number[] = [];
    await h.client.callTool({ name: 'trigger-long-running-operation', arguments: { duration: 0.4, steps: 4 } }, undefined, {
      onprogress: (p) => progress.push(p.progress),
    });
    // The host's SDK may drop the last one when it shares a chunk with the result (its
    // own behaviour with any stdio server); those that arrive are in order.
    expect(progress.length).toBeGreaterThanOrEqual(3);
    expect(progress).toEqual(progress.map((_, i) => i + 1));
    expect((await h.client.listResources()).resources.length).toBeGreaterThan(0);
    expect((await h.client.listPrompts()).prompts.map((p) => p.name)).toContain('simple-prompt');
    // Anything but protocol on the bridge's stdout would have surfaced as a parse error.
    expect(hostErrors(h.errors)).toEqual([]);
  });

  it('survives repeated cuts between bridge and server during a burst and a long-running call', async () => {
    const h = await hostThroughBridge(everything);
    proxy.cutRandomly({ minMs: 50, maxMs: 200 });
    const cutsBefore = proxy.cuts;
    const progress: number[] = [];
    const long = h.client.callTool(
      { name: 'trigger-long-running-operation', arguments: { duration: 2, steps: 10 } },
      undefined,
      { onprogress: (p) => progress.push(p.progress), timeout: 20_000 },
    );
    const calls: Promise<void>[] = [];
    for (let wave = 0; wave < 8; wave++) {
      for (let i = 0; i < 15; i++) {
        const n = wave * 15 + i;
        calls.push(h.client.callTool({ name: 'echo', arguments: { message: `b${n}` } }).then((r) => expect(text(r)).toBe(`Echo: b${n}`)));
      }
      await new Promise((r) => setTimeout(r, 200));
    }
    await Promise.all(calls);
    expect(text(await long)).toBe('Long running operation completed. Duration: 2 seconds, Steps: 10.');
    proxy.stopCutting();
    expect(proxy.cuts - cutsBefore).toBeGreaterThan(3);
    // The host's SDK runs notification handlers a microtask late but settles a result at
    // once: progress that arrives in the same chunk as the result is dropped by the host.
    // After a reconnect the replay can put the last few progress notifications and the
    // result in one chunk (seen under load: 8 of 10), so only order and a prefix are ours.
    expect(progress.length).toBeGreaterThanOrEqual(3);
    expect(progress).toEqual(progress.map((_, i) => i + 1));
    expect(hostErrors(h.errors)).toEqual([]);
    expect(h.closes()).toBe(0);
    // The reconnects were reported on stderr, never on stdout.
    expect(h.stderr.join('')).toMatch(/tether mcp: link lost.*reconnecting/);
  });

  it('server-memory through the bridge: N create_entities during cuts give exactly N entities', async () => {
    const memory = memoryServer();
    cleanups.push(() => memory.cleanup());
    const h = await hostThroughBridge(memory);
    const N = 25;
    proxy.cutRandomly({ minMs: 30, maxMs: 120 });
    for (let i = 0; i < N; i++) {
      const call = h.client.callTool({
        name: 'create_entities',
        arguments: { entities: [{ name: `b${i}`, entityType: 'test', observations: [] }] },
      });
      if (i % 3 === 0) setTimeout(() => proxy.cutAll(), i % 4); // also cut while calls are in flight
      const r = await call;
      expect((r.structuredContent as { entities: unknown[] }).entities).toHaveLength(1);
    }
    proxy.stopCutting();
    const graph = (await h.client.callTool({ name: 'read_graph', arguments: {} })).structuredContent as { entities: { name: string }[] };
    expect(graph.entities.map((e) => e.name).sort()).toEqual(Array.from({ length: N }, (_, i) => `b${i}`).sort());
    expect(h.stderr.join('')).toMatch(/tether mcp: reconnected/);
    expect(h.errors).toEqual([]);
  });

  it('stdin EOF closes the remote server and exits 0; stdout carries only protocol', async () => {
    const b = runBridgeProcess(['--url', server.url, '--', ...[everything.command, ...everything.args]]);
    // EOF once the answer is out, as a host does: a server may exit at EOF without answering
    // what it read just before (that race is the server's, not the bridge's).
    b.child.stdin.write(`${initialize}\n`);
    await expect.poll(() => b.out().includes('"id":1'), { timeout: 10_000 }).toBe(true);
    b.child.stdin.end();
    expect(await b.exited).toBe(0);
    const lines = b.out().split('\n').filter((l) => l !== '');
    expect(lines.length).toBeGreaterThan(0);
    for (const line of lines) expect(JSON.parse(line)).toMatchObject({ jsonrpc: '2.0' });
    expect(JSON.parse(lines[0]!)).toMatchObject({ id: 1, result: { serverInfo: { name: 'mcp-servers/everything' } } });
  });

  it("mirrors the remote process's exit code", async () => {
    const b = runBridgeProcess(['--url', server.url, '--', node, '-e', "console.error('bye'); process.exit(7)"]);
    expect(await b.exited).toBe(7);
    expect(b.err()).toMatch(/bye/);
    expect(b.out()).toBe('');
  });

  it('session really lost (the server stopped): exits non-zero at once with the true message on stderr', async () => {
    const own = await startTetherServer({});
    const port = Number(new URL(own.url).port);
    let restarted: Target | undefined;
    cleanups.push(async () => {
      await restarted?.stop();
      await own.stop().catch(() => {});
    });
    const b = runBridgeProcess(['--url', own.url, '--', ...[everything.command, ...everything.args]]);
    b.child.stdin.write(`${initialize}\n`);
    await expect.poll(() => b.out().includes('"id":1'), { timeout: 10_000 }).toBe(true);
    await own.stop();
    restarted = await startTetherServer({ port });
    expect(await b.exited).toBe(EXIT_SESSION_LOST);
    expect(b.err()).toContain('tether mcp: server stopped; process killed\n');
    expect(b.err()).not.toMatch(/reconnecting/);
  });

  it('a remote command that cannot start: non-zero exit and the reason on stderr', async () => {
    const b = runBridgeProcess(['--url', server.url, '--', '/nonexistent/server'], '');
    expect(await b.exited).not.toBe(0);
    expect(b.err()).toBe("tether mcp: the remote host cannot start '/nonexistent/server': No such file or directory (os error 2)\n");
    expect(b.out()).toBe('');
  });

  it('passes --env and --token-file; a wrong token exits non-zero saying why', async () => {
    const secured = await startTetherServer({ token: 'tok-42' });
    cleanups.push(() => secured.stop());
    const dir = mkdtempSync(path.join(tmpdir(), 'tether-mcp-token-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const good = path.join(dir, 'good');
    const bad = path.join(dir, 'bad');
    writeFileSync(good, 'tok-42\n');
    writeFileSync(bad, 'nope\n');
    const getEnv = JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'get-env', arguments: {} } });
    const initialized = JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' });
    const b = runBridgeProcess(
      ['--url', secured.url, '--token-file', good, '--env', 'GREETING=hello there', '--', everything.command, ...everything.args],
      [initialize, initialized, getEnv, ''].join('\n'),
    );
    expect(await b.exited).toBe(0);
    const reply = b.out().split('\n').filter(Boolean).map((l) => JSON.parse(l)).find((m) => m.id === 2);
    expect(JSON.parse(reply.result.content[0].text)).toMatchObject({ GREETING: 'hello there' });

    const refused = runBridgeProcess(['--url', secured.url, '--token-file', bad, '--', 'true'], '');
    expect(await refused.exited).toBe(EXIT_SESSION_LOST);
    expect(refused.err()).toMatch(/tether mcp: cannot connect to .*(401|invalid websocket bearer token)/);
    expect(refused.out()).toBe('');
  });

  it('SIGTERM to the bridge kills the remote server and exits 143', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'tether-mcp-sig-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const pidFile = path.join(dir, 'pid');
    const script = `require('fs').writeFileSync(${JSON.stringify(pidFile)}, String(process.pid)); process.stdin.resume(); setInterval(() => {}, 1000);`;
    const b = runBridgeProcess(['--url', server.url, '--', node, '-e', script]);
    await expect.poll(() => existsSync(pidFile) && readFileSync(pidFile, 'utf8') !== '', { timeout: 10_000 }).toBe(true);
    const pid = Number(readFileSync(pidFile, 'utf8'));
    b.child.kill('SIGTERM');
    expect(await b.exited).toBe(143);
    await expect.poll(() => isAlive(pid), { timeout: 5000 }).toBe(false);
  });

  it('stops on SIGTERM while its host does not read stdout (the pipe full): the remote server killed, exit 143', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'tether-mcp-flood-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const pidFile = path.join(dir, 'pid');
    // The bridge's stdout is a FIFO nobody reads (see fifo.ts). Once full it stays full, so
    // whatever the bridge writes after that waits in its own buffer.
    const stdout = makeFifo(dir, 'stdout');
    cleanups.push(() => stdout.close());
    // A remote "server" that floods its stdout with notifications, faster than anyone reads.
    const flood = `echo $$ > '${pidFile}'; exec yes '{"jsonrpc":"2.0","method":"notifications/message","params":{}}'`;
    const child = spawn(node, [tetherBin, 'mcp', '--url', server.url, '--', 'sh', '-c', flood], { cwd: repoRoot, stdio: ['pipe', stdout.fd, 'pipe'] });
    cleanups.push(() => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      child.stdin!.destroy();
    });
    let stderr = '';
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
      child.once('exit', (code, signal) => resolve({ code, signal })),
    );
    await expect.poll(() => existsSync(pidFile) && readFileSync(pidFile, 'utf8').trim() !== '', { timeout: 20_000 }).toBe(true);
    const pid = Number(readFileSync(pidFile, 'utf8'));
    // The pipe full, then the producer asleep in write(2): the bridge can hand nothing on, so
    // the chain behind it (the client's acks, the server's window) holds the producer back.
    await untilHeldBack(stdout, pid);
    child.kill('SIGTERM');
    // Within the 10 s the docs promise (the test's timeout bounds it).
    expect(await exited).toEqual({ code: 143, signal: null });
    await expect.poll(() => running(pid), { timeout: 5000 }).toBe(false);
    expect(stderr).toMatch(/stdout was not read for 2 s: exiting without the last \d+ bytes/);
  });

  it('usage errors exit 2 and explain', async () => {
    const noCommand = runBridgeProcess(['--url', server.url]);
    expect(await noCommand.exited).toBe(2);
    expect(noCommand.err()).toMatch(/no remote command/);
    const noUrl = runBridgeProcess(['--url']);
    expect(await noUrl.exited).toBe(2);
    expect(noUrl.err()).toMatch(/--url needs a value/);
  });

  it('parses flags like tether exec, plus --env NAME forwarding and no --tty', () => {
    const local = { SECRET_FOR_SERVER: 's3cr3t' };
    expect(
      parseMcpArgs(['--url=ws://127.0.0.1:1', '-e', 'A=1=2', '--env', 'SECRET_FOR_SERVER', '--env', 'UNSET_HERE', '--cwd', '/tmp', '--', 'npx', '-y', 'pkg'], local),
    ).toMatchObject({
      url: 'ws://127.0.0.1:1',
      cwd: '/tmp',
      env: { A: '1=2', SECRET_FOR_SERVER: 's3cr3t' },
      command: ['npx', '-y', 'pkg'],
    });
    expect(() => parseMcpArgs(['--url', 'http://x', '--', 'a'], {})).toThrow(/ws:\/\//);
    // Without '--' (hosts like the MCP Inspector drop it): the command starts at the first non-option.
    expect(parseMcpArgs(['--url', 'ws://x', 'npx', '-y', 'pkg', '--port', '1'], {})).toMatchObject({ command: ['npx', '-y', 'pkg', '--port', '1'] });
    expect(() => parseMcpArgs(['--url', 'ws://x', '--tty', '--', 'a'], {})).toThrow(/--tty cannot be used with mcp/);
    expect(() => parseMcpArgs(['--url', 'ws://x', '--env', 'bad name', '--', 'a'], {})).toThrow(/NAME=VALUE or a variable NAME/);
    expect(parseMcpArgs(['--', 'a'], { TETHER_URL: 'ws://h:1' })).toMatchObject({ url: 'ws://h:1' });
    // --name as tether exec's: the session's name, for tether attach --watch.
    expect(parseMcpArgs(['--url', 'ws://x', '--name', 'srv.1', '--', 'a'], {})).toMatchObject({ name: 'srv.1', command: ['a'] });
    expect(() => parseMcpArgs(['--url', 'ws://x', '--name', 'bad name', '--', 'a'], {})).toThrow(/--name .*\(got 'bad name'\)/);
    expect(() => parseMcpArgs(['--url', 'ws://x', '--detach', '--', 'a'], {})).toThrow(/unknown option '--detach'/);
    // After '--', everything belongs to the remote command, even what looks like our flags.
    expect(parseMcpArgs(['--url', 'ws://x', '--', 'srv', '--env', 'X'], {})).toMatchObject({ command: ['srv', '--env', 'X'], env: {} });
  });
});
