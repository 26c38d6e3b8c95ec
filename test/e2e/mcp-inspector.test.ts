/**
 * The MCP Inspector 0.15 (CLI mode; a real host, a devDependency) launching `tether mcp` the
 * way its README launches any stdio server — `mcp-inspector --cli <command> <args…> --method
 * …` — with no `--` (the Inspector would drop it anyway), against server-everything running
 * on a tether server: tools/list and tools/call.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tetherArgs } from '../helpers/cli.js';
import { everything, inspect, node } from '../helpers/mcp-peers.js';
import { startTetherServer, type TetherTarget } from '../helpers/tether.js';

let target: TetherTarget;

beforeAll(async () => {
  target = await startTetherServer({});
});
afterAll(() => target?.stop());

describe('the MCP Inspector (CLI) launching tether mcp', () => {
  it('lists and calls the tools of server-everything on a tether server, with no -- anywhere', async () => {
    // `--env`, not `-e`: the Inspector takes -e for itself (its own KEY=VALUE for the child).
    const bridge = ['--cli', node, ...tetherArgs(['mcp', '--url', target.url, '--env', 'GREETING=through tether', everything.command, ...everything.args])];
    expect(bridge).not.toContain('--');
    const [tools, echo, env] = await Promise.all([
      inspect([...bridge, '--method', 'tools/list']),
      inspect([...bridge, '--method', 'tools/call', '--tool-name', 'echo', '--tool-arg', 'message=from the inspector']),
      inspect([...bridge, '--method', 'tools/call', '--tool-name', 'get-env']),
    ]);
    expect(tools.tools.map((t: { name: string }) => t.name)).toEqual(expect.arrayContaining(['echo', 'get-sum', 'get-env']));
    expect(echo.content).toEqual([{ type: 'text', text: 'Echo: from the inspector' }]);
    // The remote server got the variable: the options before its command were tether's.
    expect(JSON.parse(env.content[0].text)).toMatchObject({ GREETING: 'through tether' });
    // Every bridge ends its session (session/close) when the Inspector is done with it (the
    // Inspector may exit before its child has finished: allow it a moment).
    await expect.poll(() => target.server.sessionCount, { timeout: 5_000 }).toBe(0);
  }, 120_000);
});
