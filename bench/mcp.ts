/**
 * MCP benchmark (issue 4): tools/call round trip of server-everything's `echo` tool, made
 * by an MCP SDK Client,
 *   - locally: the SDK's own StdioClientTransport (the baseline an MCP host has today);
 *   - through tether: ExecStdioClientTransport to a `tether serve` process on loopback;
 *   - through the bridge: the SDK's StdioClientTransport running `tether mcp` (what an MCP
 *     host configured with `"command": "tether"` does), to the same server.
 * Target: tether adds under 1 ms at p50 over local stdio.
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { ExecStdioClientTransport } from '../src/mcp/index.js';
import { ms, summarize, table, verdict, type Summary } from './lib/stats.js';
import { benchNodeArgs, startTetherProcess } from './lib/servers.js';

const SAMPLES = Number(process.env.BENCH_MCP_SAMPLES ?? 500);
const WARMUP = Number(process.env.BENCH_MCP_WARMUP ?? 100);
const CALL_TIMEOUT_MS = 30_000;

const repoRoot = fileURLToPath(new URL('../', import.meta.url));
const everythingArgs = [path.join(repoRoot, 'node_modules/@modelcontextprotocol/server-everything/dist/index.js'), 'stdio'];

/** An MCP SDK client on `transport`, connected; `calls(n)` times n sequential `echo` calls (ms). */
export async function mcpEchoClient(transport: Transport): Promise<{ calls(n: number): Promise<number[]>; close(): Promise<void> }> {
  const client = new Client({ name: 'tether-bench', version: '0.0.0' });
  await client.connect(transport);
  const call = () => client.callTool({ name: 'echo', arguments: { message: 'ping' } }, undefined, { timeout: CALL_TIMEOUT_MS });
  return {
    calls: async (n) => {
      const samples: number[] = [];
      for (let i = 0; i < n; i++) {
        const t0 = performance.now();
        await call();
        samples.push(performance.now() - t0);
      }
      return samples;
    },
    close: () => client.close(),
  };
}

/** server-everything over the SDK's own stdio transport: the baseline an MCP host has today. */
export const localStdio = (): Transport => new StdioClientTransport({ command: process.execPath, args: everythingArgs, stderr: 'ignore' });

/** The SDK's stdio transport running `tether mcp --url URL -- server-everything` (an MCP host configured with `"command": "tether"`). */
export const tetherMcpBridge = (url: string): Transport =>
  new StdioClientTransport({
    command: process.execPath,
    args: [...benchNodeArgs(), path.join(repoRoot, 'bin/tether.js'), 'mcp', '--url', url, '--', process.execPath, ...everythingArgs],
    cwd: repoRoot,
    stderr: 'ignore',
  });

/**
 * The SDK's stdio transport running the bare bridge (lib/mcp-floor-bridge.ts) to a bare server
 * (lib/mcp-floor-server.ts) at `url`: the same two extra processes and four socket hops as
 * `tether mcp`, doing nothing but passing bytes (bench/floors.ts's two-process floor).
 */
export const bareChainBridge = (url: string): Transport =>
  new StdioClientTransport({
    command: process.execPath,
    args: [...benchNodeArgs(), '--import', 'tsx', path.join(repoRoot, 'bench/lib/mcp-floor-bridge.ts'), url],
    cwd: repoRoot,
    stderr: 'ignore',
  });

/** server-everything as a command line (for a server that runs it). */
export const everythingCommand = (): string[] => [process.execPath, ...everythingArgs];

async function measure(transport: Transport): Promise<Summary> {
  const client = await mcpEchoClient(transport);
  try {
    await client.calls(WARMUP);
    return summarize(await client.calls(SAMPLES));
  } finally {
    await client.close();
  }
}

export async function run(): Promise<void> {
  const server = await startTetherProcess();
  try {
    const local = await measure(localStdio());
    const viaTransport = await measure(
      new ExecStdioClientTransport({ url: server.url, command: process.execPath, args: everythingArgs, stderr: 'ignore' }),
    );
    const viaBridge = await measure(tetherMcpBridge(server.url));

    const row = (name: string, s: Summary): string[] => [
      name,
      ms(s.p50),
      ms(s.p99),
      ms(s.mean),
      name === 'local stdio (SDK)' ? '' : `+${ms(s.p50 - local.p50)}`,
      name === 'local stdio (SDK)' ? '' : `${(s.p50 / local.p50).toFixed(2)}x`,
    ];
    process.stdout.write(
      `\nMCP tools/call round trip (server-everything echo, ${SAMPLES} sequential calls after ${WARMUP} warm-up, loopback)\n`,
    );
    process.stdout.write(
      table([
        ['path', 'p50', 'p99', 'mean', 'added p50', 'p50 ratio'],
        row('local stdio (SDK)', local),
        row('tether ExecStdioClientTransport', viaTransport),
        row('tether mcp bridge', viaBridge),
      ]) + '\n',
    );
    const added = viaTransport.p50 - local.p50;
    process.stdout.write(`target: tether adds < 1 ms at p50 over local stdio: ${verdict(added < 1)} (+${ms(added)})\n`);
  } finally {
    await server.stop();
  }
}

// `node --import tsx bench/mcp.ts` runs just this one.
if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  await run();
}
