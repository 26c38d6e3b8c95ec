/**
 * ExecStdioClientTransport and the `tether mcp` bridge against the real Codex exec-server
 * (interop only): a remote stdio MCP server on Codex survives link cuts the same way.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { ExecStdioClientTransport } from '../../src/mcp/index.js';
import { startCodexServer, type CodexServer } from '../helpers/codex.js';
import { ChaosProxy } from '../../src/chaos/proxy.js';
import { everything, memoryServer, node, repoRoot, tetherBin, text } from '../helpers/mcp-peers.js';

let codex: CodexServer;
let proxy: ChaosProxy;
const cleanups: (() => Promise<void> | void)[] = [];

beforeAll(async () => {
  codex = await startCodexServer({});
  proxy = await ChaosProxy.inFrontOf(codex.url);
});
afterEach(async () => {
  proxy?.heal();
  for (const c of cleanups.splice(0).reverse()) await c();
});
afterAll(async () => {
  await proxy?.close();
  await codex?.stop();
});

async function connect(transport: ExecStdioClientTransport | StdioClientTransport) {
  const client = new Client({ name: 'tether-codex-interop', version: '0.0.0' });
  const errors: Error[] = [];
  let closes = 0;
  client.onerror = (e) => errors.push(e);
  client.onclose = () => closes++;
  await client.connect(transport);
  cleanups.push(() => client.close());
  return { client, errors, closes: () => closes };
}

describe('MCP over a Codex exec-server', () => {
  it('tools, progress, resources and prompts through ExecStdioClientTransport', async () => {
    const { client, errors } = await connect(new ExecStdioClientTransport({ url: codex.url, ...everything, stderr: 'ignore' }));
    expect(text(await client.callTool({ name: 'echo', arguments: { message: 'codex' } }))).toBe('Echo: codex');
    const progress: number[] = [];
    await client.callTool({ name: 'trigger-long-running-operation', arguments: { duration: 0.5, steps: 5 } }, undefined, {
      onprogress: (p) => progress.push(p.progress),
    });
    expect(progress).toEqual([1, 2, 3, 4, 5]);
    expect((await client.listResources()).resources.length).toBeGreaterThan(0);
    expect((await client.listPrompts()).prompts.length).toBeGreaterThan(0);
    expect(errors).toEqual([]);
  });

  it('cuts during a burst and a long-running call: every call completes once, progress in order', async () => {
    const s = await connect(new ExecStdioClientTransport({ url: proxy.url, ...everything, stderr: 'ignore' }));
    proxy.cutRandomly({ minMs: 100, maxMs: 300 });
    const progress: number[] = [];
    const long = s.client.callTool({ name: 'trigger-long-running-operation', arguments: { duration: 2, steps: 10 } }, undefined, {
      onprogress: (p) => progress.push(p.progress),
      timeout: 30_000,
    });
    const calls: Promise<void>[] = [];
    for (let wave = 0; wave < 5; wave++) {
      for (let i = 0; i < 10; i++) {
        const n = wave * 10 + i;
        calls.push(s.client.callTool({ name: 'echo', arguments: { message: `c${n}` } }).then((r) => expect(text(r)).toBe(`Echo: c${n}`)));
      }
      await new Promise((r) => setTimeout(r, 250));
    }
    await Promise.all(calls);
    expect(text(await long)).toMatch(/completed/);
    proxy.stopCutting();
    expect(progress).toEqual(Array.from({ length: 10 }, (_, i) => i + 1));
    expect(s.errors).toEqual([]);
    expect(s.closes()).toBe(0);
  });

  it('server-memory: N create_entities during cuts give exactly N entities', async () => {
    const memory = memoryServer();
    cleanups.push(() => memory.cleanup());
    const s = await connect(new ExecStdioClientTransport({ url: proxy.url, ...memory, stderr: 'ignore' }));
    const N = 15;
    proxy.cutRandomly({ minMs: 80, maxMs: 250 });
    for (let i = 0; i < N; i++) {
      await s.client.callTool({ name: 'create_entities', arguments: { entities: [{ name: `k${i}`, entityType: 't', observations: [] }] } });
    }
    proxy.stopCutting();
    const graph = (await s.client.callTool({ name: 'read_graph', arguments: {} })).structuredContent as { entities: { name: string }[] };
    expect(graph.entities.map((e) => e.name).sort()).toEqual(Array.from({ length: N }, (_, i) => `k${i}`).sort());
    expect(s.errors).toEqual([]);
  });

  it('the tether mcp bridge to Codex survives cuts', async () => {
    const transport = new StdioClientTransport({
      command: node,
      args: [tetherBin, 'mcp', '--url', proxy.url, '--', everything.command, ...everything.args],
      cwd: repoRoot,
      stderr: 'ignore',
    });
    const s = await connect(transport);
    proxy.cutRandomly({ minMs: 100, maxMs: 300 });
    const results = [];
    for (let i = 0; i < 20; i++) results.push(text(await s.client.callTool({ name: 'get-sum', arguments: { a: i, b: i } })));
    proxy.stopCutting();
    expect(results).toEqual(Array.from({ length: 20 }, (_, i) => `The sum of ${i} and ${i} is ${2 * i}.`));
    expect(s.errors).toEqual([]);
    expect(s.closes()).toBe(0);
  });
});
