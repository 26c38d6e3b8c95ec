/**
 * MCP sessions over ExecStdioClientTransport while the chaos proxy cuts the link between
 * the ExecClient and the tether server: no call may fail, be lost or run twice, and the
 * MCP Client must never see the transport close.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { ExecStdioClientTransport } from '../../src/mcp/index.js';
import { SessionLostError } from '../../src/client/index.js';
import { startTetherServer } from '../helpers/tether.js';
import { ChaosProxy } from '../../src/chaos/proxy.js';
import type { Target } from '../helpers/target.js';
import { everything, memoryServer, text } from '../helpers/mcp-peers.js';

let server: Target;
let proxy: ChaosProxy;
const cleanups: (() => Promise<void> | void)[] = [];

beforeAll(async () => {
  server = await startTetherServer({});
  proxy = await ChaosProxy.inFrontOf(server.url);
});
afterEach(async () => {
  proxy?.heal();
  for (const c of cleanups.splice(0).reverse()) await c();
});
afterAll(async () => {
  await proxy?.close();
  await server?.stop();
});

interface Watched {
  client: Client;
  transport: ExecStdioClientTransport;
  errors: Error[];
  closes: () => number;
  recoveries: () => number;
}

async function connectThroughProxy(params: { command: string; args: string[]; env?: Record<string, string> }): Promise<Watched> {
  const transport = new ExecStdioClientTransport({ url: proxy.url, ...params, stderr: 'ignore' });
  const client = new Client({ name: 'tether-chaos', version: '0.0.0' });
  const errors: Error[] = [];
  let closes = 0;
  client.onerror = (e) => errors.push(e);
  client.onclose = () => closes++;
  await client.connect(transport);
  let recoveries = 0;
  transport.client!.on('state', ({ state }: { state: string }) => {
    if (state === 'recovering') recoveries++;
  });
  cleanups.push(() => client.close());
  return { client, transport, errors, closes: () => closes, recoveries: () => recoveries };
}

describe('link cuts under an MCP session', () => {
  it('a burst of calls made while the link is cut repeatedly all complete, correctly, once', async () => {
    const s = await connectThroughProxy(everything);
    proxy.cutRandomly({ minMs: 40, maxMs: 160 });
    const cutsBefore = proxy.cuts;
    const calls: Promise<void>[] = [];
    // Waves of concurrent calls spread over about two seconds of cuts.
    for (let wave = 0; wave < 10; wave++) {
      for (let i = 0; i < 20; i++) {
        const n = wave * 20 + i;
        calls.push(
          s.client.callTool({ name: 'echo', arguments: { message: `m${n}` } }).then((r) => expect(text(r)).toBe(`Echo: m${n}`)),
        );
      }
      await new Promise((r) => setTimeout(r, 200));
    }
    await Promise.all(calls);
    proxy.stopCutting();
    expect(proxy.cuts - cutsBefore).toBeGreaterThan(3);
    expect(s.recoveries()).toBeGreaterThan(0);
    // No "Connection closed", no response for an unknown id (a doubled call), no close.
    expect(s.errors).toEqual([]);
    expect(s.closes()).toBe(0);
  });

  it('a long-running call survives cuts and every progress notification arrives, in order', async () => {
    const s = await connectThroughProxy(everything);
    const progress: number[] = [];
    const call = s.client.callTool(
      { name: 'trigger-long-running-operation', arguments: { duration: 3, steps: 15 } },
      undefined,
      { onprogress: (p) => progress.push(p.progress), timeout: 20_000 },
    );
    proxy.cutRandomly({ minMs: 150, maxMs: 400 });
    const result = await call;
    proxy.stopCutting();
    expect(text(result)).toBe('Long running operation completed. Duration: 3 seconds, Steps: 15.');
    expect(progress).toEqual(Array.from({ length: 15 }, (_, i) => i + 1));
    expect(s.recoveries()).toBeGreaterThan(0);
    expect(s.errors).toEqual([]);
    expect(s.closes()).toBe(0);
  });

  it('server-memory: N create_entities calls made during cuts yield exactly N entities', async () => {
    const memory = memoryServer();
    cleanups.push(() => memory.cleanup());
    const s = await connectThroughProxy(memory);
    const N = 40;
    proxy.cutRandomly({ minMs: 30, maxMs: 120 });
    // Sequential: the memory server itself read-modify-writes its file per call, so
    // concurrent calls would race inside the server, not in tether.
    for (let i = 0; i < N; i++) {
      const call = s.client.callTool({
        name: 'create_entities',
        arguments: { entities: [{ name: `e${i}`, entityType: 'test', observations: [`made by call ${i}`] }] },
      });
      // Calls are quicker than the random cuts: also cut every third one while in flight,
      // at varying moments (request on the wire, being executed, answer on the wire).
      if (i % 3 === 0) setTimeout(() => proxy.cutAll(), i % 4);
      const r = await call;
      // A call applied twice would answer [] the second time (names are unique).
      expect((r.structuredContent as { entities: unknown[] }).entities).toHaveLength(1);
    }
    proxy.stopCutting();
    const graph = (await s.client.callTool({ name: 'read_graph', arguments: {} })).structuredContent as {
      entities: { name: string; observations: string[] }[];
    };
    expect(graph.entities.map((e) => e.name).sort()).toEqual(Array.from({ length: N }, (_, i) => `e${i}`).sort());
    for (const e of graph.entities) expect(e.observations).toEqual([`made by call ${e.name.slice(1)}`]);
    expect(s.recoveries()).toBeGreaterThan(0);
    expect(s.errors).toEqual([]);
    expect(s.closes()).toBe(0);
  });
});

describe('link down, then back', () => {
  it('calls made while the link is down wait, then are delivered exactly once', async () => {
    const memory = memoryServer();
    cleanups.push(() => memory.cleanup());
    const s = await connectThroughProxy(memory);
    const recovered = new Promise((resolve) => s.transport.client!.once('recovered', resolve));
    proxy.refuse(true);
    proxy.cutAll();
    // Made during the outage: a side-effecting call (one only: the memory server's own
    // read-modify-write of its file is not safe for concurrent calls).
    const create = s.client.callTool({
      name: 'create_entities',
      arguments: { entities: [{ name: 'while-down', entityType: 'test', observations: [] }] },
    });
    await new Promise((r) => setTimeout(r, 300)); // an outage of a few reconnect attempts
    expect(s.transport.client!.state).toBe('recovering');
    proxy.refuse(false);
    await recovered;
    expect((await create).structuredContent).toEqual({ entities: [{ name: 'while-down', entityType: 'test', observations: [] }] });
    const graph = (await s.client.callTool({ name: 'read_graph', arguments: {} })).structuredContent as { entities: { name: string }[] };
    expect(graph.entities.map((e) => e.name)).toEqual(['while-down']);
    expect(s.errors).toEqual([]);
    expect(s.closes()).toBe(0);
  });

  it('a black-holed link (laptop asleep) is noticed by keepalive and the call completes once it is back', async () => {
    const transport = new ExecStdioClientTransport({ url: proxy.url, ...everything, stderr: 'ignore', keepaliveTimeoutMs: 800 });
    const client = new Client({ name: 'tether-sleep', version: '0.0.0' });
    const errors: Error[] = [];
    client.onerror = (e) => errors.push(e);
    await client.connect(transport);
    cleanups.push(() => client.close());
    const recovering = new Promise((resolve) => transport.client!.once('state', resolve));
    proxy.blackhole(true);
    const call = client.callTool({ name: 'get-sum', arguments: { a: 20, b: 22 } });
    await recovering; // the keepalive noticed the dead link
    proxy.blackhole(false);
    expect(text(await call)).toBe('The sum of 20 and 22 is 42.');
    expect(errors).toEqual([]);
  });
});

describe('session really lost', () => {
  it('link down past the recovery deadline: pending calls fail with the reason, onclose fires once', async () => {
    const transport = new ExecStdioClientTransport({ url: proxy.url, ...everything, stderr: 'ignore', recoveryDeadlineMs: 1500 });
    const client = new Client({ name: 'tether-deadline', version: '0.0.0' });
    const errors: Error[] = [];
    let closes = 0;
    client.onerror = (e) => errors.push(e);
    client.onclose = () => closes++;
    await client.connect(transport);
    cleanups.push(() => client.close());
    const pending = client.callTool({ name: 'trigger-long-running-operation', arguments: { duration: 30, steps: 3 } });
    proxy.refuse(true);
    proxy.cutAll();
    // Either the answer the transport synthesises ("Connection closed: <reason>") or the
    // failed write of the request itself, whichever comes first: both carry the reason.
    await expect(pending).rejects.toThrow(/session .*lost: the server could not be reached again before the recovery deadline/);
    await expect.poll(() => closes, { timeout: 10_000 }).toBe(1);
    // Exactly one report, the reason (no "response for an unknown message ID" noise either).
    expect(errors.map((e) => (e instanceof SessionLostError ? e.reason : e.message))).toEqual(['deadline']);
  });

  it('server restarted without the session: onerror says so once, onclose fires once, pending calls fail clearly', async () => {
    const own = await startTetherServer({});
    const port = Number(new URL(own.url).port);
    let restarted: Target | undefined;
    const link = await ChaosProxy.inFrontOf(own.url);
    cleanups.push(async () => {
      await link.close();
      await restarted?.stop();
      await own.stop().catch(() => {});
    });
    const transport = new ExecStdioClientTransport({ url: link.url, ...everything, stderr: 'ignore', recoveryDeadlineMs: 10_000 });
    const client = new Client({ name: 'tether-lost', version: '0.0.0' });
    const transportErrors: Error[] = [];
    let closes = 0;
    await client.connect(transport);
    // Wrap what the Client installed, to observe without changing its behaviour.
    const sdkOnError = transport.onerror;
    const sdkOnClose = transport.onclose;
    transport.onerror = (e) => {
      transportErrors.push(e);
      sdkOnError?.(e);
    };
    transport.onclose = () => {
      closes++;
      sdkOnClose?.();
    };
    expect(text(await client.callTool({ name: 'echo', arguments: { message: 'before' } }))).toBe('Echo: before');

    const pending = client.callTool({ name: 'trigger-long-running-operation', arguments: { duration: 30, steps: 3 } });
    // The link dies silently first (a server that stops says so, and the session would be lost
    // as 'stopped' at once: test/server/stop-notice.test.ts); retries are refused meanwhile.
    link.refuse(true);
    link.cutAll();
    await own.stop();
    restarted = await startTetherServer({ port });
    link.refuse(false);

    await expect(pending).rejects.toThrow(/session .*lost: the server no longer knows the session/);
    await expect.poll(() => closes, { timeout: 15_000 }).toBe(1);
    expect(transportErrors).toHaveLength(1);
    expect(transportErrors[0]).toBeInstanceOf(SessionLostError);
    expect((transportErrors[0] as SessionLostError).reason).toBe('expired');
    await expect(client.callTool({ name: 'echo', arguments: { message: 'after' } })).rejects.toThrow(/Not connected/);
    await new Promise((r) => setTimeout(r, 200));
    expect(closes).toBe(1);
  });
});
