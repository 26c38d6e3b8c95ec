/**
 * Watching an MCP server run by `tether mcp --name` (docs/attach.md, "Watching an MCP
 * server"), the server run as root and as uid 65534. The host is an MCP SDK Client driving
 * `tether mcp` with the SDK's own StdioClientTransport, wrapped to record every message it
 * sends and receives:
 * - `tether attach --watch m` alongside shows the server's JSON-RPC responses live (the
 *   answer carrying each call's unique argument arrives while the session runs); its stdin
 *   (an injected tools/call) reaches nothing; the library's watcher handle refuses to write;
 *   `tether attach m` without --watch is refused (the host holds the writer), and so is a
 *   second `tether mcp --name m` (exit 255);
 * - the host gets exactly its answers: no parse error, every response addressed to one of
 *   its requests, each request answered once, nothing of the injected call;
 * - `tether attach --take m`: tether mcp stops relaying at once and exits, saying why; the
 *   taker's request and its answer never reach the host.
 */
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { ExecClient } from '../../src/client/index.js';
import { spawnAttach, type Attached } from '../helpers/attach-process.js';
import { cleanupsAfterEach } from '../helpers/cleanups.js';
import { runTether } from '../helpers/cli.js';
import { everything, node, repoRoot, tetherBin, text } from '../helpers/mcp-peers.js';
import { serverUsers, startServerProcess } from '../helpers/server-process.js';

const cleanups = cleanupsAfterEach();

/** The host's transport, recording what it sends and every message it receives. */
class RecordingTransport implements Transport {
  onmessage?: Transport['onmessage'];
  onerror?: Transport['onerror'];
  onclose?: Transport['onclose'];
  readonly sent: JSONRPCMessage[] = [];
  readonly received: JSONRPCMessage[] = [];
  readonly errors: Error[] = [];
  readonly stderr: string[] = [];
  readonly closed: Promise<void>;

  constructor(private readonly inner: StdioClientTransport) {
    let closed!: () => void;
    this.closed = new Promise((resolve) => (closed = resolve));
    inner.onmessage = (message: JSONRPCMessage) => {
      this.received.push(message);
      this.onmessage?.(message);
    };
    inner.onerror = (error) => {
      this.errors.push(error);
      this.onerror?.(error);
    };
    inner.onclose = () => {
      closed();
      this.onclose?.();
    };
    inner.stderr!.on('data', (d: Buffer) => this.stderr.push(d.toString()));
  }
  start(): Promise<void> {
    return this.inner.start();
  }
  send(message: JSONRPCMessage): Promise<void> {
    this.sent.push(message);
    return this.inner.send(message);
  }
  close(): Promise<void> {
    return this.inner.close();
  }
}

async function hostThroughTetherMcp(url: string, name: string) {
  const inner = new StdioClientTransport({
    command: node,
    args: [tetherBin, 'mcp', '--url', url, '--name', name, '--', everything.command, ...everything.args],
    cwd: repoRoot,
    stderr: 'pipe',
  });
  const transport = new RecordingTransport(inner);
  const client = new Client({ name: 'mcp-host', version: '0.0.0' });
  await client.connect(transport);
  cleanups.push(() => client.close());
  return { client, transport };
}

const attach = (args: string[]): Attached => spawnAttach(cleanups, args);

/** A raw tools/call of server-everything's echo, as a line of the MCP stdio stream. */
const echoRequest = (id: string, message: string) =>
  `${JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'echo', arguments: { message } } })}\n`;

const idOf = (m: JSONRPCMessage): unknown => (m as { id?: unknown }).id;
const isRequest = (m: JSONRPCMessage) => 'method' in m && idOf(m) !== undefined;
const isResponse = (m: JSONRPCMessage) => ('result' in m || 'error' in m) && !('method' in m);

/** The host got exactly its answers: each of its requests answered once, no response it did not ask for, no parse error. */
function expectOnlyItsAnswers(transport: RecordingTransport): void {
  // The host's SDK reports a progress notification sharing a chunk with its result as an
  // "unknown token" (with any stdio server): not a stream error. Nothing else is expected.
  expect(transport.errors.filter((e) => !/progress notification for an unknown token/.test(e.message))).toEqual([]);
  const asked = transport.sent.filter(isRequest).map(idOf);
  const answered = transport.received.filter(isResponse).map(idOf);
  expect([...answered].sort()).toEqual([...asked].sort());
}

describe.each(serverUsers())('watching an MCP server under tether mcp (server runs as %s)', (user) => {
  it('tether attach --watch shows its responses live and injects nothing; the host gets exactly its answers; a second writer is refused', async () => {
    const server = await startServerProcess({ user });
    cleanups.push(() => server.dispose());
    const { client, transport } = await hostThroughTetherMcp(server.url, 'm');
    expect(client.getServerVersion()?.name).toBe('mcp-servers/everything');

    const watcher = attach(['--url', server.url, '--watch', 'm']);
    await server.waitForLog(/audit attach: role=watcher .*name=m /);
    // A watcher forwards no stdin: this request, had it reached the server, would be answered on its stdout.
    const injected = `injected-${randomBytes(6).toString('hex')}`;
    watcher.child.stdin!.write(echoRequest(injected, injected));

    const nonce = randomBytes(6).toString('hex');
    for (let i = 0; i < 3; i++) {
      const marker = `watched-${nonce}-${i}`;
      expect(text(await client.callTool({ name: 'echo', arguments: { message: marker } }))).toBe(`Echo: ${marker}`);
      // Live: the watcher shows the answer while the session runs.
      await watcher.until((out) => out.includes(`Echo: ${marker}`));
    }

    // The host holds the writer: a plain attach is refused, clearly, and changes nothing.
    const refused = await runTether(['attach', '--url', server.url, 'm'], { input: echoRequest('refused', injected) });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/session m has a writer attached: attach with take to move it, or as a watcher/);
    // Another tether mcp cannot take the name while this one lives.
    const twin = await runTether(['mcp', '--url', server.url, '--name', 'm', '--', node, '-e', ''], { input: '' });
    expect(twin.code).toBe(255);
    expect(twin.stderr).toMatch(/session name m is in use by another session of this token/);
    expect(twin.stdout).toBe('');
    // The library's watcher handle refuses to write, naming why.
    const looker = await ExecClient.attach(server.url, 'm', { role: 'watcher' });
    cleanups.push(() => looker.close());
    const [mcpServer] = looker.processes();
    expect(() => mcpServer!.stdin!.write(echoRequest('looker', injected))).toThrow(/watched read-only/);
    await looker.close();

    // The host still works after all this.
    expect(text(await client.callTool({ name: 'echo', arguments: { message: `after-${nonce}` } }))).toBe(`Echo: after-${nonce}`);
    await watcher.until((out) => out.includes(`Echo: after-${nonce}`));

    // The host closes: tether mcp ends the server and its session, and the watcher sees the
    // end. What the watcher printed is then the server's whole stdout from its attach on.
    await client.close();
    await transport.closed;
    await watcher.closed;
    expectOnlyItsAnswers(transport);
    expect(JSON.stringify(transport.received)).not.toContain(injected);
    // The watcher's stdout is the server's: JSON-RPC messages only, none answering the injected request.
    const watched = watcher.stdout().split('\n').filter(Boolean);
    for (const line of watched) expect(() => JSON.parse(line), line).not.toThrow();
    expect(watcher.stdout()).not.toContain(injected);
    expect(watched.length).toBeGreaterThanOrEqual(4);
  }, 120_000);

  it('tether attach --take: tether mcp stops relaying at once and exits saying why; the taker\'s answers never reach the host', async () => {
    const server = await startServerProcess({ user });
    cleanups.push(() => server.dispose());
    const { client, transport } = await hostThroughTetherMcp(server.url, 't');
    expect(text(await client.callTool({ name: 'echo', arguments: { message: 'before' } }))).toBe('Echo: before');

    const taker = attach(['--url', server.url, '--take', 't']);
    await server.waitForLog(/audit attach: writer of session .* taken/);
    const taken = `taken-${randomBytes(6).toString('hex')}`;
    taker.child.stdin!.write(echoRequest(taken, taken));
    await taker.until((out) => out.includes(`Echo: ${taken}`));
    // The taker's stdin ends: the server exits, and with it every attachment.
    taker.child.stdin!.end();
    await transport.closed;
    await taker.closed;

    expect(JSON.stringify(transport.received)).not.toContain(taken);
    expectOnlyItsAnswers(transport);
    expect(transport.stderr.join('')).toMatch(/tether mcp: the session was taken by another attachment/);
  }, 120_000);
});
