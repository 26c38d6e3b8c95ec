/**
 * The whole MCP surface through the gateway (issue 15), with server-everything behind it
 * twice: `ev` over stdio and `evh` over Streamable HTTP (so every resource URI collides and
 * evh's come prefixed). Run as a host would, once over the gateway's Streamable HTTP
 * endpoint and once through `tether gateway --stdio`: tools, prompts, resources (list,
 * templates, read, subscribe and updates), completions, logging, progress, and the
 * server-to-client requests (sampling, elicitation, roots) answered by the host.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
  LoggingMessageNotificationSchema,
  ResourceListChangedNotificationSchema,
  ResourceUpdatedNotificationSchema,
  type LoggingMessageNotification,
} from '@modelcontextprotocol/sdk/types.js';
import { Gateway, parseConfig, startGatewayHttp, type GatewayHttp } from '../../src/gateway/index.js';
import { everything, everythingHttp, node, tetherBin, text } from '../helpers/mcp-peers.js';

const dir = mkdtempSync(path.join(tmpdir(), 'tether-gw-surface-'));
let evh: Awaited<ReturnType<typeof everythingHttp>>;
let configJson: object;

beforeAll(async () => {
  evh = await everythingHttp();
  configJson = {
    supervisor: { healthIntervalMs: 0, initialBackoffMs: 50, maxBackoffMs: 400 },
    mcpServers: {
      ev: { command: everything.command, args: everything.args },
      evh: { type: 'http', url: evh.url },
    },
  };
}, 30_000);

afterAll(async () => {
  await evh?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** A host that can answer sampling, elicitation and roots, and records what it is told. */
function makeHost(name: string) {
  const client = new Client({ name, version: '1.0.0' }, { capabilities: { sampling: {}, elicitation: { form: {} }, roots: { listChanged: true } } });
  const sampled: string[] = [];
  const logs: LoggingMessageNotification['params'][] = [];
  const updated: string[] = [];
  let samplingGate: Promise<void> = Promise.resolve();
  client.setRequestHandler(CreateMessageRequestSchema, async (req) => {
    const content = req.params.messages[0]?.content;
    sampled.push(content && 'text' in content ? String(content.text) : '');
    await samplingGate;
    return { model: 'host-model', role: 'assistant', content: { type: 'text', text: `answer from ${name}` } };
  });
  client.setRequestHandler(ElicitRequestSchema, async () => ({ action: 'accept', content: { name: `${name} user`, check: true } }));
  client.setRequestHandler(ListRootsRequestSchema, async () => ({ roots: [{ uri: `file:///work/${name}`, name: `${name} root` }] }));
  client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => void logs.push(n.params));
  client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => void updated.push(n.params.uri));
  return {
    client,
    sampled,
    logs,
    updated,
    holdSampling(): () => void {
      let release!: () => void;
      samplingGate = new Promise((r) => (release = r));
      return release;
    },
  };
}

async function until(check: () => boolean | Promise<boolean>, what: string, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

interface HostKind {
  name: string;
  connect(host: ReturnType<typeof makeHost>): Promise<void>;
  close(): Promise<void>;
}

const httpHost: HostKind = (() => {
  let gateway: Gateway;
  let http: GatewayHttp;
  return {
    name: 'Streamable HTTP',
    async connect(host) {
      if (!gateway) {
        gateway = new Gateway(parseConfig(configJson));
        http = await startGatewayHttp(gateway, { port: 0 });
        await gateway.start();
      }
      await host.client.connect(new StreamableHTTPClientTransport(new URL(`${http.url}/mcp`)));
    },
    async close() {
      await http?.close();
      await gateway?.close();
    },
  };
})();

const stdioHost: HostKind = {
  name: 'stdio (tether gateway --stdio)',
  async connect(host) {
    const file = path.join(dir, 'stdio.json');
    writeFileSync(file, JSON.stringify(configJson));
    await host.client.connect(new StdioClientTransport({ command: node, args: [tetherBin, 'gateway', '--config', file, '--stdio'], stderr: 'pipe' }));
  },
  async close() {},
};

describe.each([httpHost, stdioHost])('the MCP surface through the gateway: $name host', (kind) => {
  const host = makeHost('host-a');
  const client = host.client;

  beforeAll(async () => {
    await kind.connect(host);
  }, 30_000);
  afterAll(async () => {
    await client.close().catch(() => {});
    await kind.close();
  });

  it('advertises every capability at initialize, before servers are listed', () => {
    expect(client.getServerCapabilities()).toMatchObject({
      tools: { listChanged: true },
      resources: { subscribe: true, listChanged: true },
      prompts: { listChanged: true },
      completions: {},
      logging: {},
    });
  });

  it('tools: both servers, prefixed, including the ones offered to clients that can sample, elicit and list roots', async () => {
    const names = (await client.listTools()).tools.map((t) => t.name);
    expect(names).toEqual(expect.arrayContaining(['ev__echo', 'evh__echo', 'ev__trigger-sampling-request', 'ev__trigger-elicitation-request', 'ev__get-roots-list']));
    expect(text(await client.callTool({ name: 'evh__echo', arguments: { message: 'via http' } }))).toBe('Echo: via http');
  });

  it('prompts: list (prefixed) and get', async () => {
    const names = (await client.listPrompts()).prompts.map((p) => p.name);
    expect(names).toEqual(expect.arrayContaining(['ev__simple-prompt', 'ev__args-prompt', 'ev__completable-prompt', 'ev__resource-prompt', 'evh__simple-prompt']));
    const simple = await client.getPrompt({ name: 'evh__simple-prompt' });
    expect(simple.messages[0]!.role).toBe('user');
    const args = await client.getPrompt({ name: 'ev__args-prompt', arguments: { city: 'Lisbon', state: 'LX' } });
    expect(JSON.stringify(args.messages)).toContain('Lisbon');
    const withResource = await client.getPrompt({ name: 'ev__resource-prompt', arguments: { resourceType: 'Text', resourceId: '2' } });
    expect(JSON.stringify(withResource.messages)).toContain('demo://resource/dynamic/text/2');
    await expect(client.getPrompt({ name: 'nobody__x' })).rejects.toThrow(/^MCP error -32602: unknown prompt 'nobody__x'/);
  });

  it('resources: list and templates (the first server keeps the URI, a colliding one is prefixed), read each', async () => {
    const resources = (await client.listResources()).resources.map((r) => r.uri);
    const docs = resources.filter((u) => u.startsWith('demo://resource/static/document/'));
    expect(docs.length).toBeGreaterThan(0);
    expect(resources).toContain(`tether-gateway://evh/${docs[0]}`);
    const templates = (await client.listResourceTemplates()).resourceTemplates.map((t) => t.uriTemplate);
    expect(templates).toEqual(expect.arrayContaining(['demo://resource/dynamic/text/{resourceId}', 'tether-gateway://evh/demo://resource/dynamic/text/{resourceId}']));

    const plain = await client.readResource({ uri: docs[0]! });
    expect(plain.contents[0]).toMatchObject({ uri: docs[0] });
    const prefixed = await client.readResource({ uri: `tether-gateway://evh/${docs[0]}` });
    expect(prefixed.contents[0]).toMatchObject({ uri: `tether-gateway://evh/${docs[0]}` });
    expect((prefixed.contents[0] as { text: string }).text).toBe((plain.contents[0] as { text: string }).text);
    // A template instance nobody lists: routed by the template.
    const dynamic = await client.readResource({ uri: 'demo://resource/dynamic/text/7' });
    expect(JSON.stringify(dynamic.contents)).toContain('7');
    const dynamicH = await client.readResource({ uri: 'tether-gateway://evh/demo://resource/dynamic/blob/3' });
    expect(dynamicH.contents[0]).toMatchObject({ uri: 'tether-gateway://evh/demo://resource/dynamic/blob/3', blob: expect.any(String) });
    await expect(client.readResource({ uri: 'nowhere://x' })).rejects.toThrow(/^MCP error -32602: unknown resource 'nowhere:\/\/x'/);
  });

  it('completions: a prompt argument, with context', async () => {
    const dept = await client.complete({ ref: { type: 'ref/prompt', name: 'ev__completable-prompt' }, argument: { name: 'department', value: 'E' } });
    expect(dept.completion.values).toEqual(['Engineering']);
    const who = await client.complete({
      ref: { type: 'ref/prompt', name: 'evh__completable-prompt' },
      argument: { name: 'name', value: '' },
      context: { arguments: { department: 'Sales' } },
    });
    expect(who.completion.values).toEqual(['David', 'Eve', 'Frank']);
    // A resource template's variable, plain and prefixed.
    const id = await client.complete({ ref: { type: 'ref/resource', uri: 'demo://resource/dynamic/text/{resourceId}' }, argument: { name: 'resourceId', value: '12' } });
    expect(id.completion.values).toEqual(['12']);
    const idH = await client.complete({ ref: { type: 'ref/resource', uri: 'tether-gateway://evh/demo://resource/dynamic/blob/{resourceId}' }, argument: { name: 'resourceId', value: 'x' } });
    expect(idH.completion.values).toEqual([]);
  });

  it('resources list_changed: a resource a server adds reaches the host as notifications/resources/list_changed and in the list', async () => {
    let changed = 0;
    client.setNotificationHandler(ResourceListChangedNotificationSchema, () => void changed++);
    const result = await client.callTool({ name: 'evh__gzip-file-as-resource', arguments: { name: 'hello.gz', data: 'data:text/plain;base64,aGVsbG8gZ2F0ZXdheQ==' } });
    expect(result.isError).toBeFalsy();
    await until(() => changed > 0, 'notifications/resources/list_changed');
    const uris = (await client.listResources()).resources.map((r) => r.uri);
    // Only evh has it: its own URI, unprefixed.
    expect(uris).toContain('demo://resource/session/hello.gz');
    const read = await client.readResource({ uri: 'demo://resource/session/hello.gz' });
    expect(read.contents[0]).toMatchObject({ uri: 'demo://resource/session/hello.gz', blob: expect.any(String) });
  });

  it('logging: setLevel reaches the servers, their messages reach the host named by server', async () => {
    await client.setLoggingLevel('debug');
    for (const server of ['ev', 'evh']) {
      await client.callTool({ name: `${server}__toggle-simulated-logging`, arguments: {} });
      await until(() => host.logs.some((l) => l.logger === server || String(l.logger).startsWith(`${server}/`)), `a log message from ${server}`);
      await client.callTool({ name: `${server}__toggle-simulated-logging`, arguments: {} });
    }
  });

  it('subscribe: updates of a subscribed resource reach the host under the URI it subscribed to; unsubscribe', async () => {
    await client.subscribeResource({ uri: 'demo://resource/dynamic/text/1' });
    await client.subscribeResource({ uri: 'tether-gateway://evh/demo://resource/dynamic/text/1' });
    await client.callTool({ name: 'ev__toggle-subscriber-updates', arguments: {} });
    await client.callTool({ name: 'evh__toggle-subscriber-updates', arguments: {} });
    await until(() => host.updated.includes('demo://resource/dynamic/text/1'), 'an update from ev');
    await until(() => host.updated.includes('tether-gateway://evh/demo://resource/dynamic/text/1'), 'an update from evh');
    await client.callTool({ name: 'ev__toggle-subscriber-updates', arguments: {} });
    await client.callTool({ name: 'evh__toggle-subscriber-updates', arguments: {} });
    await client.unsubscribeResource({ uri: 'demo://resource/dynamic/text/1' });
    await client.unsubscribeResource({ uri: 'tether-gateway://evh/demo://resource/dynamic/text/1' });
  });

  it('sampling: a server asks the host through the gateway and gets its answer', async () => {
    for (const server of ['ev', 'evh']) {
      const result = await client.callTool({ name: `${server}__trigger-sampling-request`, arguments: { prompt: `hello from ${server}`, maxTokens: 20 } });
      expect(result.isError).toBeFalsy();
      expect(text(result)).toContain('answer from host-a');
      expect(host.sampled.at(-1)).toContain(`hello from ${server}`);
    }
  });

  it('elicitation: a server asks the host for input and gets it', async () => {
    const result = await client.callTool({ name: 'evh__trigger-elicitation-request', arguments: {} });
    expect(result.isError).toBeFalsy();
    expect(JSON.stringify(result.content)).toContain('host-a user');
  });

  it('roots: the servers see the roots the host announced', async () => {
    await until(async () => text(await client.callTool({ name: 'ev__get-roots-list', arguments: {} })).includes('file:///work/host-a'), "ev to see host-a's root");
    await until(async () => text(await client.callTool({ name: 'evh__get-roots-list', arguments: {} })).includes('file:///work/host-a'), "evh to see host-a's root");
  });

  it('progress: relayed from an HTTP server too', async () => {
    const progress: number[] = [];
    const result = await client.callTool({ name: 'evh__trigger-long-running-operation', arguments: { duration: 0.6, steps: 3 } }, undefined, {
      onprogress: (p) => progress.push(p.progress),
    });
    expect(result.isError).toBeFalsy();
    expect(progress.slice(0, 2)).toEqual([1, 2]);
  });

  it('cancellation: a host that aborts gets its answer at once, and the gateway stays usable', async () => {
    const controller = new AbortController();
    const call = client.callTool({ name: 'ev__trigger-long-running-operation', arguments: { duration: 20, steps: 20 } }, undefined, {
      signal: controller.signal,
      onprogress: () => controller.abort('enough'),
    });
    await expect(call).rejects.toThrow();
    expect(text(await client.callTool({ name: 'ev__echo', arguments: { message: 'still here' } }))).toBe('Echo: still here');
  });
});

describe('server-to-client requests with two hosts (HTTP)', () => {
  let gateway: Gateway;
  let http: GatewayHttp;
  const a = makeHost('host-a');
  const b = makeHost('host-b');

  beforeAll(async () => {
    gateway = new Gateway(parseConfig(configJson));
    http = await startGatewayHttp(gateway, { port: 0 });
    await gateway.start();
    await a.client.connect(new StreamableHTTPClientTransport(new URL(`${http.url}/mcp`)));
    await b.client.connect(new StreamableHTTPClientTransport(new URL(`${http.url}/mcp`)));
  }, 30_000);
  afterAll(async () => {
    await a.client.close().catch(() => {});
    await b.client.close().catch(() => {});
    await http?.close();
    await gateway?.close();
  });

  it('each host gets the sampling of its own call; with calls of two hosts in flight the request is refused as ambiguous', async () => {
    expect(text(await b.client.callTool({ name: 'ev__trigger-sampling-request', arguments: { prompt: 'b alone', maxTokens: 5 } }))).toContain('answer from host-b');

    const release = a.holdSampling();
    const first = a.client.callTool({ name: 'ev__trigger-sampling-request', arguments: { prompt: 'a first', maxTokens: 5 } });
    await until(() => a.sampled.includes(`Resource trigger-sampling-request context: a first`), "host-a's sampling request");
    const second = await b.client.callTool({ name: 'ev__trigger-sampling-request', arguments: { prompt: 'b second', maxTokens: 5 } });
    expect(second.isError).toBe(true);
    expect(text(second)).toMatch(/ambiguous: 2 hosts have requests in flight to it/);
    release();
    expect(text(await first)).toContain('answer from host-a');
  });

  it('roots are the union of what the hosts announce', async () => {
    const roots = async () => text(await a.client.callTool({ name: 'ev__get-roots-list', arguments: {} }));
    await until(async () => (await roots()).includes('file:///work/host-a') && (await roots()).includes('file:///work/host-b'), 'both roots');
  });

  it('the log level asked of the servers is the most verbose one a host set', async () => {
    await a.client.setLoggingLevel('error');
    await b.client.setLoggingLevel('info');
    expect((gateway.get('ev') as unknown as { catalog: { logLevel: string } }).catalog.logLevel).toBe('info');
    await (b.client.transport as StreamableHTTPClientTransport).terminateSession();
    await b.client.close();
    await until(() => (gateway.get('ev') as unknown as { catalog: { logLevel: string } }).catalog.logLevel === 'error', 'the level to follow the remaining host');
  });
});
