/**
 * Backends of both MCP eras behind one gateway (issue #26): a 2026-07-28-only server (SDK v2
 * `serveStdio`, legacy rejected), a dual one, server-everything (2025), and the 2026-only one
 * again on a tether exec-server. Served to 2025 hosts: an SDK v1 Client over Streamable
 * HTTP and through `tether gateway --stdio`; and 2026 hosts: SDK v2 Clients in `auto` mode
 * and pinned to 2026-07-28, through `--stdio` and over Streamable HTTP (the same /mcp); and
 * the MCP Inspector 0.15 CLI. Each lists every tool, reads a resource, gets
 * a prompt and calls a tool of every backend.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client as ClientV2, StreamableHTTPClientTransport as StreamableHttpV2 } from '@modelcontextprotocol/client';
import { StdioClientTransport as StdioV2 } from '@modelcontextprotocol/client/stdio';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CreateMessageRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { Gateway, parseConfig, startGatewayHttp, type GatewayHttp } from '../../src/gateway/index.js';
import { startTetherServer, type TetherTarget } from '../helpers/tether.js';
import { everything, inspect, node, repoRoot, tetherBin, text } from '../helpers/mcp-peers.js';

const dir = mkdtempSync(path.join(tmpdir(), 'tether-gw-eras-'));
const v2 = (mode: string) => ({ command: node, args: [path.join(repoRoot, 'test/fixtures/mcp-v2-server.mjs'), mode] });
let tether: TetherTarget;
let gateway: Gateway;
let http: GatewayHttp;
let configFile: string;
const cancelLog = path.join(dir, 'cancel.log');

beforeAll(async () => {
  tether = await startTetherServer({});
  const config = {
    supervisor: { healthIntervalMs: 0, initialBackoffMs: 50, maxBackoffMs: 400 },
    mcpServers: {
      modern: { ...v2('modern'), env: { V2_CANCEL_LOG: cancelLog } },
      dual: v2('dual'),
      ev: { command: everything.command, args: everything.args },
      rmodern: { ...v2('modern'), tether: { url: tether.url } },
    },
  };
  configFile = path.join(dir, 'eras.json');
  writeFileSync(configFile, JSON.stringify(config));
  gateway = new Gateway(parseConfig(config));
  http = await startGatewayHttp(gateway, { port: 0 });
  await gateway.start();
}, 60_000);

afterAll(async () => {
  await http?.close();
  await gateway?.close();
  await tether?.stop();
  rmSync(dir, { recursive: true, force: true });
});

type Host = { listTools(): Promise<{ tools: { name: string }[] }>; callTool(p: object): Promise<unknown>; readResource(p: object): Promise<{ contents: unknown[] }>; getPrompt(p: object): Promise<{ messages: unknown[] }>; close(): Promise<void> };

async function exercise(client: Host): Promise<void> {
  const tools = (await client.listTools()).tools.map((t) => t.name);
  for (const server of ['modern', 'dual', 'ev', 'rmodern']) expect(tools).toContain(`${server}__echo`);
  expect(text(await client.callTool({ name: 'modern__echo', arguments: { message: 'a' } }))).toBe('Echo (modern): a');
  expect(text(await client.callTool({ name: 'rmodern__echo', arguments: { message: 'b' } }))).toBe('Echo (modern): b');
  expect(text(await client.callTool({ name: 'dual__echo', arguments: { message: 'c' } }))).toBe('Echo (legacy): c');
  expect(text(await client.callTool({ name: 'ev__echo', arguments: { message: 'd' } }))).toBe('Echo: d');
  // The first in the config keeps the URI both v2 fixtures offer.
  const read = await client.readResource({ uri: 'v2://hello' });
  expect(read.contents[0]).toMatchObject({ text: 'hello from modern' });
  const prompt = await client.getPrompt({ name: 'modern__greet', arguments: { name: 'Ada' } });
  expect(prompt.messages[0]).toMatchObject({ content: { text: 'Hello, Ada' } });
}

describe('backends of both eras behind one gateway', () => {
  it('each entry connects in its era, kept in its status', () => {
    const eras = Object.fromEntries(['modern', 'dual', 'ev', 'rmodern'].map((n) => [n, gateway.get(n)!.detail().protocolEra]));
    expect(eras).toEqual({ modern: '2026-07-28', dual: '2025', ev: '2025', rmodern: '2026-07-28' });
  });

  it('an SDK v1 host over Streamable HTTP', async () => {
    const client = new Client({ name: 'v1-http', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${http.url}/mcp`)));
    try {
      await exercise(client as unknown as Host);
    } finally {
      await client.close();
    }
  });

  it('an SDK v1 host through tether gateway --stdio', async () => {
    const client = new Client({ name: 'v1-stdio', version: '1.0.0' });
    await client.connect(new StdioClientTransport({ command: node, args: [tetherBin, 'gateway', '--config', configFile, '--stdio'], stderr: 'pipe' }));
    try {
      await exercise(client as unknown as Host);
    } finally {
      await client.close();
    }
  }, 30_000);

  it.each([
    ['auto', { mode: 'auto' as const }],
    ['pinned to 2026-07-28', { mode: { pin: '2026-07-28' } }],
  ])('an SDK v2 host (%s) through tether gateway --stdio is served in 2026-07-28', async (_, versionNegotiation) => {
    const client = new ClientV2({ name: 'v2-host', version: '1.0.0' }, { versionNegotiation });
    await client.connect(new StdioV2({ command: node, args: [tetherBin, 'gateway', '--config', configFile, '--stdio'], stderr: 'pipe' }));
    try {
      expect(client.getNegotiatedProtocolVersion()).toBe('2026-07-28');
      await exercise(client as unknown as Host);
      // Progress from a 2025 backend reaches a 2026 host.
      const progress: number[] = [];
      const result = await client.callTool({ name: 'ev__trigger-long-running-operation', arguments: { duration: 0.3, steps: 3 } }, { onprogress: (p) => progress.push(p.progress) });
      expect(text(result)).toMatch(/completed/i);
      expect(progress.length).toBeGreaterThan(0);
    } finally {
      await client.close();
    }
  }, 30_000);

  it.each([
    ['auto', { mode: 'auto' as const }],
    ['pinned to 2026-07-28', { mode: { pin: '2026-07-28' } }],
  ])('an SDK v2 host (%s) over Streamable HTTP is served in 2026-07-28 on the same /mcp', async (_, versionNegotiation) => {
    const client = new ClientV2({ name: 'v2-http', version: '1.0.0' }, { versionNegotiation });
    await client.connect(new StreamableHttpV2(new URL(`${http.url}/mcp`)));
    try {
      expect(client.getNegotiatedProtocolVersion()).toBe('2026-07-28');
      await exercise(client as unknown as Host);
    } finally {
      await client.close();
    }
  });

  it("a 2026-07-28 backend's input_required sampling reaches the 2025 host whose call is in flight, and its answer goes back", async () => {
    const client = new Client({ name: 'v1-sampler', version: '1.0.0' }, { capabilities: { sampling: {} } });
    const asked: string[] = [];
    client.setRequestHandler(CreateMessageRequestSchema, async (req) => {
      const content = req.params.messages[0]?.content;
      asked.push(content && 'text' in content ? String(content.text) : '');
      return { model: 'host-model', role: 'assistant', content: { type: 'text', text: 'forty-two' } };
    });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${http.url}/mcp`)));
    try {
      expect(text(await client.callTool({ name: 'modern__ask', arguments: { question: 'the answer?' } }))).toBe('sampled: forty-two');
      expect(asked).toEqual(['the answer?']);
    } finally {
      await client.close();
    }
  });

  it("a 2025 backend's sampling during a 2026-07-28 host's call becomes input_required, answered on the host's retry", async () => {
    const client = new ClientV2({ name: 'v2-sampler', version: '1.0.0' }, { versionNegotiation: { mode: { pin: '2026-07-28' } }, capabilities: { sampling: {} } });
    const asked: string[] = [];
    client.setRequestHandler('sampling/createMessage', async (req) => {
      const content = req.params.messages[0]?.content as { text?: string } | undefined;
      asked.push(String(content?.text));
      return { model: 'host-model', role: 'assistant', content: { type: 'text', text: 'from the 2026 host' } };
    });
    await client.connect(new StreamableHttpV2(new URL(`${http.url}/mcp`)));
    try {
      expect(text(await client.callTool({ name: 'dual__ask', arguments: { question: 'q?' } }))).toBe('sampled: from the 2026 host');
      expect(asked).toEqual(['q?']);
    } finally {
      await client.close();
    }
  });

  it("a 2026-07-28 host's abort cancels the call on a 2026-07-28 backend", async () => {
    const client = new ClientV2({ name: 'v2-cancel', version: '1.0.0' }, { versionNegotiation: { mode: { pin: '2026-07-28' } } });
    await client.connect(new StreamableHttpV2(new URL(`${http.url}/mcp`)));
    const lines = () => (existsSync(cancelLog) ? readFileSync(cancelLog, 'utf8').split('\n').filter(Boolean) : []);
    try {
      const aborter = new AbortController();
      const call = client.callTool({ name: 'modern__wait', arguments: {} }, { signal: aborter.signal }).catch((e: unknown) => e);
      await expect.poll(lines, { timeout: 10_000 }).toContain('started');
      aborter.abort();
      expect(await call).toBeInstanceOf(Error);
      await expect.poll(lines, { timeout: 10_000 }).toContain('cancelled');
    } finally {
      await client.close();
    }
  });

  it('the MCP Inspector 0.15 CLI (a 2025 host) over Streamable HTTP: lists, calls a 2026 backend, reads, gets a prompt', async () => {
    const target = ['--cli', `${http.url}/mcp`];
    const [tools, call, resource, prompt] = await Promise.all([
      inspect([...target, '--method', 'tools/list']),
      inspect([...target, '--method', 'tools/call', '--tool-name', 'modern__echo', '--tool-arg', 'message=from the inspector']),
      inspect([...target, '--method', 'resources/read', '--uri', 'v2://hello']),
      inspect([...target, '--method', 'prompts/get', '--prompt-name', 'modern__greet', '--prompt-args', 'name=Lisbon']),
    ]);
    expect(tools.tools.map((t: { name: string }) => t.name)).toEqual(expect.arrayContaining(['modern__echo', 'dual__echo', 'ev__echo', 'rmodern__echo']));
    expect(call.content).toEqual([{ type: 'text', text: 'Echo (modern): from the inspector' }]);
    expect(resource.contents[0]).toMatchObject({ text: 'hello from modern' });
    expect(JSON.stringify(prompt.messages)).toContain('Hello, Lisbon');
  }, 120_000);

  // Last: it changes the shared gateway's config.
  it('a 2026-07-28 host hears list changes on its subscription stream (a server added by a reload)', async () => {
    let changed: (tools: string[]) => void = () => {};
    const heard = new Promise<string[]>((resolve) => (changed = resolve));
    const client = new ClientV2(
      { name: 'v2-listener', version: '1.0.0' },
      { versionNegotiation: { mode: { pin: '2026-07-28' } }, listChanged: { tools: { onChanged: (error, tools) => { if (!error && tools?.some((t) => t.name === 'late__echo')) changed(tools.map((t) => t.name)); } } } },
    );
    await client.connect(new StreamableHttpV2(new URL(`${http.url}/mcp`)));
    try {
      await client.listTools();
      const config = JSON.parse(readFileSync(configFile, 'utf8')) as { mcpServers: Record<string, unknown> };
      config.mcpServers.late = v2('dual');
      await gateway.reconfigure(parseConfig(config));
      expect(await heard).toContain('late__echo');
    } finally {
      await client.close();
    }
  });
});
