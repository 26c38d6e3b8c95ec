/**
 * An MCP SDK Client over ExecStdioClientTransport, against real MCP servers run by an
 * in-process tether server on loopback.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { ExecClient } from '../../src/client/index.js';
import { ChaosProxy } from '../../src/chaos/proxy.js';
import { ExecStdioClientTransport, ServerProcessExitedError } from '../../src/mcp/index.js';
import { startTetherServer, type TetherTarget } from '../helpers/tether.js';
import { everything, node, text } from '../helpers/mcp-peers.js';

let server: TetherTarget;
const cleanups: (() => Promise<void> | void)[] = [];

beforeAll(async () => {
  server = await startTetherServer({});
});
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  // Whatever a test started on the server is gone once its clients are closed: no orphans.
  // (childPids() also lists exited processes kept readable for a while: check liveness.)
  await expect.poll(() => server.server.childPids().filter(isAlive), { timeout: 10_000 }).toEqual([]);
});
afterAll(async () => {
  await server?.stop();
});

function everythingTransport(extra: Partial<ConstructorParameters<typeof ExecStdioClientTransport>[0]> = {}) {
  const transport = new ExecStdioClientTransport({ url: server.url, ...everything, stderr: 'pipe', ...extra });
  return transport;
}

async function connect(transport: ExecStdioClientTransport) {
  const client = new Client({ name: 'tether-test', version: '0.0.0' });
  const errors: Error[] = [];
  client.onerror = (e) => errors.push(e);
  await client.connect(transport);
  cleanups.push(() => client.close());
  return { client, errors };
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('SDK Client over ExecStdioClientTransport (server-everything)', () => {
  it('initializes, lists and calls tools, reads resources and gets prompts', async () => {
    const transport = everythingTransport();
    const stderr: string[] = [];
    transport.stderr!.on('data', (d: Buffer) => stderr.push(d.toString()));
    const { client, errors } = await connect(transport);

    expect(client.getServerVersion()?.name).toBe('mcp-servers/everything');
    const tools = (await client.listTools()).tools.map((t) => t.name);
    expect(tools).toEqual(expect.arrayContaining(['echo', 'get-sum', 'trigger-long-running-operation']));

    expect(text(await client.callTool({ name: 'echo', arguments: { message: 'hello, tether' } }))).toBe('Echo: hello, tether');
    expect(text(await client.callTool({ name: 'get-sum', arguments: { a: 2, b: 40 } }))).toBe('The sum of 2 and 40 is 42.');

    const resources = (await client.listResources()).resources;
    expect(resources.length).toBeGreaterThan(0);
    const doc = resources.find((r) => r.uri.endsWith('architecture.md'))!;
    const read = await client.readResource({ uri: doc.uri });
    expect((read.contents[0] as { text: string }).text).toMatch(/Architecture/);

    const prompts = (await client.listPrompts()).prompts.map((p) => p.name);
    expect(prompts).toEqual(expect.arrayContaining(['simple-prompt', 'args-prompt']));
    const prompt = await client.getPrompt({ name: 'args-prompt', arguments: { city: 'Lisbon' } });
    expect(JSON.stringify(prompt.messages)).toMatch(/Lisbon/);

    // The server's start-up banner goes to stderr, available like the SDK's.
    expect(stderr.join('')).toMatch(/Starting default \(STDIO\) server/);
    expect(errors).toEqual([]);
  });

  it('delivers every progress notification of a long-running call, in order, before its result', async () => {
    const { client } = await connect(everythingTransport());
    const progress: number[] = [];
    const result = await client.callTool(
      { name: 'trigger-long-running-operation', arguments: { duration: 0.5, steps: 5 } },
      undefined,
      { onprogress: (p) => progress.push(p.progress) },
    );
    expect(text(result)).toBe('Long running operation completed. Duration: 0.5 seconds, Steps: 5.');
    // beyond: the SDK's local stdio transport loses the last one when it shares a chunk
    // with the result (the Protocol dispatches notifications a microtask late).
    expect(progress).toEqual([1, 2, 3, 4, 5]);
  });

  it('carries a large message (2 MiB) both ways', async () => {
    const { client } = await connect(everythingTransport());
    const message = 'é'.repeat(1024 * 1024);
    expect(text(await client.callTool({ name: 'echo', arguments: { message } }))).toBe(`Echo: ${message}`);
  });

  it('handles a burst of concurrent calls, each answered once and correctly', async () => {
    const { client, errors } = await connect(everythingTransport());
    const results = await Promise.all(
      Array.from({ length: 100 }, (_, i) => client.callTool({ name: 'get-sum', arguments: { a: i, b: 1000 } })),
    );
    results.forEach((r, i) => expect(text(r)).toBe(`The sum of ${i} and 1000 is ${i + 1000}.`));
    expect(errors).toEqual([]);
  });
});

describe('environment and credentials', () => {
  it('env is laid over the remote core environment; nothing else of the server host leaks in', async () => {
    // The in-process server shares this process's environment: a variable set here is a
    // variable of the "remote" host, and must not be inherited (core names only).
    process.env.TETHER_MCP_TEST_HOST_ONLY = 'should-not-leak';
    cleanups.push(() => void delete process.env.TETHER_MCP_TEST_HOST_ONLY);
    const { client } = await connect(everythingTransport({ env: { GREETING: 'olá', PATH: `/opt/extra:${process.env.PATH}` } }));
    const env = JSON.parse(text(await client.callTool({ name: 'get-env', arguments: {} }))) as Record<string, string>;
    expect(env.GREETING).toBe('olá');
    expect(env.PATH).toBe(`/opt/extra:${process.env.PATH}`);
    expect(env.HOME).toBe(process.env.HOME);
    expect(env.TETHER_MCP_TEST_HOST_ONLY).toBeUndefined();
  });

  it('runs in the given cwd', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'tether-mcp-cwd-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const transport = new ExecStdioClientTransport({
      url: server.url,
      command: node,
      args: ['-e', "process.stdout.write(JSON.stringify({jsonrpc:'2.0',method:'cwd',params:{cwd:process.cwd()}})+'\\n')"],
      cwd: dir,
      stderr: 'ignore',
    });
    const got = new Promise<unknown>((resolve) => (transport.onmessage = resolve));
    const closed = new Promise<void>((resolve) => (transport.onclose = resolve));
    await transport.start();
    expect(await got).toEqual({ jsonrpc: '2.0', method: 'cwd', params: { cwd: dir } });
    await closed;
  });

  it('with a token: the right one works, a wrong one fails start() clearly', async () => {
    const secured = await startTetherServer({ token: 'sesame-123' });
    cleanups.push(() => secured.stop());
    const ok = new ExecStdioClientTransport({ url: secured.url, token: 'sesame-123', ...everything, stderr: 'ignore' });
    const { client } = await connect(ok);
    expect(text(await client.callTool({ name: 'echo', arguments: { message: 'authorised' } }))).toBe('Echo: authorised');
    const bad = new ExecStdioClientTransport({ url: secured.url, token: 'wrong', ...everything, stderr: 'ignore' });
    await expect(bad.start()).rejects.toThrow(/401|invalid websocket bearer token|refused/i);
  });
});

describe('lifecycle', () => {
  it('close() ends the remote server and fires onclose once; an own client is closed too', async () => {
    const transport = everythingTransport();
    const { client } = await connect(transport);
    let closes = 0;
    const prev = transport.onclose;
    transport.onclose = () => {
      closes++;
      prev?.();
    };
    const execClient = transport.client!;
    await client.close();
    expect(closes).toBe(1);
    await expect(transport.send({ jsonrpc: '2.0', method: 'notifications/initialized' })).rejects.toThrow('Not connected');
    // The transport opened this client itself, so it closed it.
    await expect(execClient.request('environment/status')).rejects.toThrow();
  });

  it('close() on a server that ignores stdin EOF: SIGTERM after the grace period, nothing left running', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'tether-mcp-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const pidFile = path.join(dir, 'pid');
    // Reads stdin but never exits on EOF (a badly behaved server).
    const script = `require('fs').writeFileSync(${JSON.stringify(pidFile)}, String(process.pid)); process.stdin.resume(); process.stdin.on('end', () => {}); setInterval(() => {}, 1000);`;
    const transport = new ExecStdioClientTransport({ url: server.url, command: node, args: ['-e', script], stderr: 'ignore' });
    let closes = 0;
    transport.onclose = () => closes++;
    await transport.start();
    await expect.poll(() => readFileSync(pidFile, 'utf8').length > 0, { timeout: 5000 }).toBe(true);
    const pid = Number(readFileSync(pidFile, 'utf8'));
    expect(isAlive(pid)).toBe(true);
    await transport.close();
    expect(closes).toBe(1);
    await expect.poll(() => isAlive(pid), { timeout: 5000 }).toBe(false);
  });

  it('onstate, set before connect(), sees the link drop and recover, then the close; a shared client stops reaching it', async () => {
    const proxy = await ChaosProxy.inFrontOf(server.url);
    cleanups.push(() => proxy.close());
    const transport = new ExecStdioClientTransport({ url: proxy.url, ...everything, stderr: 'ignore' });
    const states: string[] = [];
    let recovered!: () => void;
    const back = new Promise<void>((resolve) => (recovered = resolve));
    transport.onstate = ({ state }) => {
      states.push(state);
      if (state === 'connected') recovered();
    };
    const { client } = await connect(transport);
    proxy.cutAll();
    await back;
    expect(text(await client.callTool({ name: 'echo', arguments: { message: 'after' } }))).toBe('Echo: after');
    await client.close();
    expect(states).toEqual(['recovering', 'connected', 'closed']);

    // On a client it was given, the transport's listener goes with the transport.
    const shared = await ExecClient.connect(server.url, { clientName: 'shared-state' });
    cleanups.push(() => shared.close());
    const onShared = new ExecStdioClientTransport({ client: shared, ...everything, stderr: 'ignore' });
    const seen: string[] = [];
    onShared.onstate = ({ state }) => seen.push(state);
    const second = await connect(onShared);
    const listeners = shared.listenerCount('state');
    await second.client.close();
    expect(shared.listenerCount('state')).toBe(listeners - 1);
    await shared.close();
    expect(seen).toEqual([]);
  });

  it('a shared ExecClient is left open by close()', async () => {
    const execClient = await ExecClient.connect(server.url, { clientName: 'shared' });
    cleanups.push(() => execClient.close());
    const transport = new ExecStdioClientTransport({ client: execClient, ...everything, stderr: 'ignore' });
    const { client } = await connect(transport);
    expect(text(await client.callTool({ name: 'echo', arguments: { message: 'x' } }))).toBe('Echo: x');
    await client.close();
    expect(execClient.state).toBe('connected');
    await expect(execClient.request('environment/status')).resolves.toEqual({ status: 'ready' });
  });

  it('a command that does not exist rejects start() with the OS reason', async () => {
    const transport = new ExecStdioClientTransport({ url: server.url, command: '/nonexistent/mcp-server', stderr: 'ignore' });
    const errors: Error[] = [];
    transport.onerror = (e) => errors.push(e);
    let closes = 0;
    transport.onclose = () => closes++;
    const client = new Client({ name: 't', version: '0' });
    await expect(client.connect(transport)).rejects.toThrow(/nonexistent|ENOENT|no such file/i);
    expect(errors.length).toBeGreaterThan(0);
    expect(closes).toBe(0);
  });

  it('a server that dies at start-up: the error carries its stderr, not a bare "Connection closed"', async () => {
    const transport = new ExecStdioClientTransport({
      url: server.url,
      command: node,
      args: ['-e', "console.error('fatal: config file missing'); process.exit(3)"],
      stderr: 'ignore',
    });
    const errors: Error[] = [];
    let closes = 0;
    const client = new Client({ name: 't', version: '0' });
    client.onerror = (e) => errors.push(e);
    client.onclose = () => closes++;
    // The pending initialize is answered with the reason, not a bare "Connection closed".
    await expect(client.connect(transport)).rejects.toThrow(/Connection closed: remote MCP server process exited with code 3.*fatal: config file missing/s);
    await expect.poll(() => closes).toBe(1);
    const exited = errors.find((e) => e instanceof ServerProcessExitedError) as ServerProcessExitedError | undefined;
    expect(exited?.exitCode).toBe(3);
    expect(exited?.message).toMatch(/exited with code 3.*\n.*fatal: config file missing/s);
  });

  it("stderr: 'inherit' copies the server's stderr to ours; 'ignore' drops it", async () => {
    const seen: string[] = [];
    const spy = vi.spyOn(process.stderr, 'write').mockImplementation(((chunk: string | Uint8Array) => {
      seen.push(Buffer.from(chunk).toString());
      return true;
    }) as typeof process.stderr.write);
    cleanups.push(() => spy.mockRestore());
    // Writes to stderr, then a message to stdout: events are delivered in the process's
    // order, so once the message is in, the stderr line has been handled.
    const script =
      "process.stderr.write('to-stderr-' + process.argv[1] + '\\n', () => process.stdout.write(JSON.stringify({jsonrpc:'2.0',method:'done'}) + '\\n')); process.stdin.resume()";
    for (const mode of ['ignore', 'inherit'] as const) {
      const transport = new ExecStdioClientTransport({ url: server.url, command: node, args: ['-e', script, mode], stderr: mode });
      expect(transport.stderr).toBeNull();
      const done = new Promise((resolve) => (transport.onmessage = resolve));
      await transport.start();
      cleanups.push(() => transport.close());
      await done;
    }
    expect(seen.join('')).toMatch(/to-stderr-inherit/);
    expect(seen.join('')).not.toMatch(/to-stderr-ignore/);
  });

  it('refuses bad parameters clearly', () => {
    expect(() => new ExecStdioClientTransport({ command: 'x' })).toThrow(/url.*client/);
    expect(() => new ExecStdioClientTransport({ command: '', url: 'ws://127.0.0.1:1' })).toThrow(/command/);
    expect(
      () => new ExecStdioClientTransport({ command: 'x', url: 'ws://127.0.0.1:1', stderr: 'overlapped' as never }),
    ).toThrow(/stderr/);
  });

  it('start() twice is an error, as in the SDK', async () => {
    const transport = everythingTransport({ stderr: 'ignore' });
    await transport.start();
    cleanups.push(() => transport.close());
    await expect(transport.start()).rejects.toThrow(/already started/);
  });

  it('sessionName names the session for tether attach --watch; a take (tether attach --take) ends the transport at once and none of the taker\'s answers reach the Client', async () => {
    const transport = everythingTransport({ sessionName: 'sdk-taken' });
    const { client, errors } = await connect(transport);
    const received: unknown[] = [];
    const deliver = transport.onmessage!;
    transport.onmessage = (message) => {
      received.push(message);
      deliver(message);
    };
    let closed!: () => void;
    const closedOnce = new Promise<void>((resolve) => (closed = resolve));
    client.onclose = () => closed();
    expect(text(await client.callTool({ name: 'echo', arguments: { message: 'mine' } }))).toBe('Echo: mine');
    const { sessions } = await transport.client!.listSessions();
    expect(sessions.find((s) => s.current)).toMatchObject({ name: 'sdk-taken' });

    const taker = await ExecClient.attach(server.url, 'sdk-taken', { take: true });
    cleanups.push(() => taker.close());
    const [proc] = taker.processes();
    let answers = '';
    const taken = `taken-${Date.now()}`;
    const answered = new Promise<void>((resolve) =>
      proc!.stdout.on('data', (d: Buffer) => {
        answers += d.toString();
        if (answers.includes(`Echo: ${taken}`)) resolve();
      }),
    );
    proc!.stdin!.write(`${JSON.stringify({ jsonrpc: '2.0', id: taken, method: 'tools/call', params: { name: 'echo', arguments: { message: taken } } })}\n`);
    await answered;
    // The taker ends the server: everything it wrote is out, whoever still reads it.
    proc!.stdin!.end();
    await closedOnce;
    expect(JSON.stringify(received)).not.toContain(taken);
    expect(errors.map((e) => e.message).join('\n')).toMatch(/taken by another attachment/);
    await expect(client.callTool({ name: 'echo', arguments: { message: 'after' } })).rejects.toThrow();
  });
});
