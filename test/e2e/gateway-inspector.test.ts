/**
 * The MCP Inspector (0.15, CLI mode: a real host, a devDependency) in front of the gateway,
 * each call written the way the Inspector's README shows: tools/list, tools/call,
 * resources/read and prompts/get through `tether gateway FILE --stdio`, through the
 * Inspector's own `--config FILE --server NAME` (a host config that launches the gateway with
 * --config), and through the gateway's Streamable HTTP endpoint.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Gateway, parseConfig, startGatewayHttp, type GatewayHttp } from '../../src/gateway/index.js';
import { everything, inspect, node, tetherBin } from '../helpers/mcp-peers.js';

const dir = mkdtempSync(path.join(tmpdir(), 'tether-gw-inspector-'));
const backends = path.join(dir, 'tether.json');
const hostConfig = path.join(dir, 'mcp.json');
const config = { supervisor: { healthIntervalMs: 0 }, mcpServers: { ev: { command: everything.command, args: everything.args } } };

beforeAll(() => {
  writeFileSync(backends, JSON.stringify(config));
  // A host config as the Inspector (and Claude Desktop, Cursor…) reads it: the gateway is one entry.
  writeFileSync(hostConfig, JSON.stringify({ mcpServers: { tether: { command: node, args: [tetherBin, 'gateway', '--config', backends, '--stdio'] } } }));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The four calls, each as the Inspector's README writes it, after `target`. */
async function fourCalls(target: string[]): Promise<void> {
  const [tools, call, resource, prompt] = await Promise.all([
    inspect([...target, '--method', 'tools/list']),
    inspect([...target, '--method', 'tools/call', '--tool-name', 'ev__echo', '--tool-arg', 'message=from the inspector']),
    inspect([...target, '--method', 'resources/read', '--uri', 'demo://resource/dynamic/text/5']),
    inspect([...target, '--method', 'prompts/get', '--prompt-name', 'ev__args-prompt', '--prompt-args', 'city=Lisbon']),
  ]);
  expect(tools.tools.map((t: { name: string }) => t.name)).toEqual(expect.arrayContaining(['list_servers', 'ev__echo', 'ev__get-sum']));
  expect(call.content).toEqual([{ type: 'text', text: 'Echo: from the inspector' }]);
  expect(resource.contents[0]).toMatchObject({ uri: 'demo://resource/dynamic/text/5', text: expect.stringContaining('5') });
  expect(JSON.stringify(prompt.messages)).toContain('Lisbon');
}

describe('the MCP Inspector (CLI) as the host', () => {
  it('launches `tether gateway FILE --stdio` (no --config for the Inspector to swallow)', async () => {
    await fourCalls(['--cli', node, tetherBin, 'gateway', backends, '--stdio']);
  }, 120_000);

  it("through its own --config/--server, with a host config that launches the gateway with --config", async () => {
    const call = await inspect(['--cli', '--config', hostConfig, '--server', 'tether', '--method', 'tools/call', '--tool-name', 'ev__get-sum', '--tool-arg', 'a=2', '--tool-arg', 'b=3']);
    expect(JSON.stringify(call.content)).toContain('5');
  }, 60_000);

  describe('over Streamable HTTP', () => {
    let gateway: Gateway;
    let http: GatewayHttp;
    beforeAll(async () => {
      gateway = new Gateway(parseConfig(config));
      http = await startGatewayHttp(gateway, { port: 0 });
      await gateway.start();
    });
    afterAll(async () => {
      await http?.close();
      await gateway?.close();
    });

    it('at http://127.0.0.1:PORT/mcp', async () => {
      await fourCalls(['--cli', `${http.url}/mcp`]);
    }, 120_000);
  });
});
