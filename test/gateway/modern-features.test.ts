/**
 * What was wired for the 2026-07-28 era but untested (issue #26): completions from a 2026
 * host (to a 2025 and a 2026 backend) and from a 2025 host to a 2026 backend; and live list
 * changes of a 2026-07-28-only backend (its tools list grows while connected) reaching hosts
 * of both eras: a v1 host over Streamable HTTP and a v2 host on its `subscriptions/listen`;
 * a 2026 backend's progress to hosts of both eras, a 2025 host's cancellation of a call on it, and a 2026 backend's sampling during a 2026 host's call, both ways through input_required.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client as ClientV2, StreamableHTTPClientTransport as StreamableHttpV2 } from '@modelcontextprotocol/client';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { Gateway, parseConfig, startGatewayHttp, type GatewayHttp } from '../../src/gateway/index.js';
import { everything, node, repoRoot, text } from '../helpers/mcp-peers.js';

const dir = mkdtempSync(path.join(tmpdir(), 'tether-gw-modern-features-'));
const cancelLog = path.join(dir, 'cancel.log');
let gateway: Gateway;
let http: GatewayHttp;

beforeAll(async () => {
  gateway = new Gateway(
    parseConfig({
      supervisor: { healthIntervalMs: 0 },
      mcpServers: {
        modern: { command: node, args: [path.join(repoRoot, 'test/fixtures/mcp-v2-server.mjs'), 'modern'], env: { V2_CANCEL_LOG: cancelLog } },
        ev: { command: everything.command, args: everything.args },
      },
    }),
  );
  http = await startGatewayHttp(gateway, { port: 0 });
  await gateway.start();
}, 60_000);

afterAll(async () => {
  await http?.close();
  await gateway?.close();
  rmSync(dir, { recursive: true, force: true });
});

const modernHost = async (options: ConstructorParameters<typeof ClientV2>[1] = {}) => {
  const client = new ClientV2({ name: 'v2-host', version: '1.0.0' }, { versionNegotiation: { mode: { pin: '2026-07-28' } }, ...options });
  await client.connect(new StreamableHttpV2(new URL(`${http.url}/mcp`)));
  expect(client.getNegotiatedProtocolVersion()).toBe('2026-07-28');
  return client;
};
const legacyHost = async () => {
  const client = new Client({ name: 'v1-host', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${http.url}/mcp`)));
  return client;
};

describe('completions across eras', () => {
  it('a 2026-07-28 host completes a prompt argument of a 2026 backend and of a 2025 backend', async () => {
    const client = await modernHost();
    try {
      const modern = await client.complete({ ref: { type: 'ref/prompt', name: 'modern__greet' }, argument: { name: 'name', value: 'A' } });
      expect(modern.completion.values).toEqual(['Ada', 'Alan']);
      const legacy = await client.complete({ ref: { type: 'ref/prompt', name: 'ev__completable-prompt' }, argument: { name: 'department', value: 'S' } });
      expect(legacy.completion.values).toEqual(['Sales', 'Support']);
    } finally {
      await client.close();
    }
  });

  it('a 2025 host completes a prompt argument of a 2026 backend', async () => {
    const client = await legacyHost();
    try {
      const result = await client.complete({ ref: { type: 'ref/prompt', name: 'modern__greet' }, argument: { name: 'name', value: 'G' } });
      expect(result.completion.values).toEqual(['Grace']);
    } finally {
      await client.close();
    }
  });
});

describe("a 2026-07-28 backend's progress", () => {
  it.each(['2025', '2026'])('reaches a %s host', async (era) => {
    const client = era === '2025' ? await legacyHost() : await modernHost();
    try {
      const progress: number[] = [];
      const onprogress = (p: { progress: number }) => progress.push(p.progress);
      const call = { name: 'modern__steps', arguments: {} };
      const result = client instanceof Client ? await client.callTool(call, undefined, { onprogress }) : await client.callTool(call, { onprogress });
      expect(text(result)).toBe('stepped');
      expect(progress).toEqual([1, 2, 3]);
    } finally {
      await client.close();
    }
  });
});

describe("a 2025 host's cancellation", () => {
  it('ends the call on a 2026-07-28 backend', async () => {
    const client = await legacyHost();
    const lines = () => (existsSync(cancelLog) ? readFileSync(cancelLog, 'utf8').split('\n').filter(Boolean) : []);
    try {
      const aborter = new AbortController();
      const call = client.callTool({ name: 'modern__wait', arguments: {} }, undefined, { signal: aborter.signal }).catch((e: unknown) => e);
      await expect.poll(lines, { timeout: 10_000 }).toContain('started');
      aborter.abort();
      expect(await call).toBeInstanceOf(Error);
      await expect.poll(lines, { timeout: 10_000 }).toContain('cancelled');
    } finally {
      await client.close();
    }
  });
});

describe('sampling between 2026-07-28 peers', () => {
  it("a 2026 backend's input_required sampling during a 2026 host's call becomes that call's input_required, and the answer goes back", async () => {
    const asked: string[] = [];
    const client = await modernHost({ capabilities: { sampling: {} } });
    client.setRequestHandler('sampling/createMessage', async (req) => {
      asked.push(String((req.params.messages[0]?.content as { text?: string } | undefined)?.text));
      return { model: 'host-model', role: 'assistant', content: { type: 'text', text: 'from the 2026 host' } };
    });
    try {
      expect(text(await client.callTool({ name: 'modern__ask', arguments: { question: 'both 2026?' } }))).toBe('sampled: from the 2026 host');
      expect(asked).toEqual(['both 2026?']);
    } finally {
      await client.close();
    }
  });
});

describe("a 2026-07-28-only backend's list changes", () => {
  it('reach a 2025 host and a 2026 host (on its subscriptions/listen stream) while both are connected', async () => {
    const heardByModern = new Promise<string[]>((resolve) => {
      void modernHost({
        listChanged: { tools: { onChanged: (error, tools) => { if (!error && tools?.some((t) => t.name === 'modern__grown')) resolve(tools.map((t) => t.name)); } } },
      }).then((c) => (modern = c));
    });
    let modern: ClientV2 | undefined;
    const legacy = await legacyHost();
    const heardByLegacy = new Promise<void>((resolve) => legacy.setNotificationHandler(ToolListChangedNotificationSchema, () => resolve()));
    try {
      await expect.poll(() => modern !== undefined, { timeout: 10_000 }).toBe(true);
      // The v2 host lists first (its listen stream is then open), as a host does.
      expect((await modern!.listTools()).tools.map((t) => t.name)).not.toContain('modern__grown');
      expect(text(await legacy.callTool({ name: 'modern__grow', arguments: {} }))).toBe('grew');
      await heardByLegacy;
      expect((await legacy.listTools()).tools.map((t) => t.name)).toContain('modern__grown');
      expect(await heardByModern).toContain('modern__grown');
      expect(text(await modern!.callTool({ name: 'modern__grown', arguments: {} }))).toBe('grown');
    } finally {
      await legacy.close();
      await modern?.close();
    }
  }, 30_000);
});

describe('what is not available across eras (docs/gateway.md, the features table)', () => {
  it("a 2025 host's resources/subscribe to a 2026 backend fails with the backend's reason; a 2026 host is offered neither subscriptions nor logging", async () => {
    const legacy = await legacyHost();
    const modern = await modernHost();
    try {
      await expect(legacy.subscribeResource({ uri: 'v2://hello' })).rejects.toThrow(/MCP server 'modern': Method 'resources\/subscribe' is not supported by the negotiated protocol version/);
      expect(legacy.getServerCapabilities()).toMatchObject({ logging: {}, resources: { subscribe: true } });
      const caps = modern.getServerCapabilities() as Record<string, { subscribe?: boolean } | undefined>;
      expect(caps.logging).toBeUndefined();
      expect(caps.resources?.subscribe).toBeUndefined();
      expect(caps.tasks).toBeUndefined();
    } finally {
      await legacy.close();
      await modern.close();
    }
  });
});
