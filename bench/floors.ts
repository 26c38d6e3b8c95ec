/**
 * Every path users take against its floor, as ratios from one run (`BENCH_ONLY_MODULE=floors
 * npm run bench`, or `node --import tsx bench/floors.ts` after `npm run prebench`). Each path
 * and its floor are measured in alternating blocks (which goes first turns every block), so
 * load from anything else on the machine hits both alike:
 *   - stream: `head -c 256MiB /dev/zero` through the ExecClient as `tether exec` drives it
 *     (binary frames, output into a pipe to `wc -c`) against the Node floor (child pipe → ws
 *     binary frames → a client writing to the same kind of pipe; lib/binary-stream.ts);
 *   - mcp: `tools/call` of server-everything's echo through `tether mcp` against local stdio,
 *     and against the bare two-process chain (lib/mcp-floor-bridge.ts to
 *     lib/mcp-floor-server.ts: the same processes and hops, passing bytes as they are), which
 *     parts what any remote path costs from what tether's own work costs (FLOORS_MCP_LINK=5ms:
 *     both servers across a link, tether against the chain);
 *   - relay: the echo round trip and 64 MiB through `tether relay` against a bare proxy process
 *     (lib/proxy-floor.ts), for a tether upstream and the Codex exec-server (BENCH_ONLY=tether
 *     for the first only; BENCH_RELAY_LINK=5ms across a link).
 * CPU per 64 MiB of the process doing the work: the tether server and this process (the
 * client) for the stream, the relay or the bare proxy for the relay.
 * Targets: stream ≥ 0.9x its floor; mcp ≤ +0.3 ms p50 over local stdio; relay (tether
 * upstream) echo ≤ 1.3x the bare proxy and throughput ≥ 90 % of it; relay (Codex upstream)
 * throughput ≥ 80 % of it. FLOORS_PATHS=stream,mcp,relay picks paths; FLOORS_BLOCKS (6).
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ExecClient } from '../src/client/index.js';
import { EXEC_LIKE, execOnce, FloorClient, startFloorServer } from './lib/binary-stream.js';
import { cpuMs } from './lib/cpu.js';
import { startLinkProcess, startMcpFloorProcess, startTetherProcess } from './lib/servers.js';
import { ms, summarize, table, verdict } from './lib/stats.js';
import { bareChainBridge, everythingCommand, localStdio, mcpEchoClient, tetherMcpBridge } from './mcp.js';
import { eachUpstream, LINK, measureRelayPaths, type Path } from './relay.js';

const MiB = 1024 * 1024;
const BLOCKS = Number(process.env.FLOORS_BLOCKS ?? 6);
const STREAM_BYTES = Number(process.env.FLOORS_STREAM_MIB ?? 256) * MiB;
const MCP_PER_BLOCK = Number(process.env.FLOORS_MCP_CALLS ?? 100);
const RELAY_ECHO_PER_BLOCK = Number(process.env.FLOORS_RELAY_ECHO ?? 30);
const PATHS = (process.env.FLOORS_PATHS ?? 'stream,mcp,relay').split(',');
const MCP_LINK = process.env.FLOORS_MCP_LINK;

const p50 = (xs: number[]): number => summarize(xs).p50;
const per64 = (cpu: number, bytes: number): string => (Number.isFinite(cpu) ? `${((cpu * 64 * MiB) / bytes).toFixed(0)} ms` : '');
const rows: string[][] = [['path', 'tether', 'floor', 'ratio', 'target', 'verdict', 'CPU / 64 MiB (tether; floor)']];

/** Each side once per block, `BLOCKS` blocks, which goes first turning every block (for two: a b, b a, a b...). */
async function inTurn(...sides: Array<() => Promise<void>>): Promise<void> {
  for (let block = 0; block < BLOCKS; block++) {
    for (let i = 0; i < sides.length; i++) await sides[(block + i) % sides.length]!();
  }
}

async function stream(): Promise<void> {
  const server = await startTetherProcess();
  const floor = await startFloorServer();
  let client: ExecClient | undefined;
  let floorClient: FloorClient | undefined;
  try {
    client = await ExecClient.connect(server.url, EXEC_LIKE);
    if (!client.extensions.has('binaryOutput')) throw new Error('tether did not accept binaryOutput');
    floorClient = await FloorClient.connect(floor.url);
    const [c, f] = [client, floorClient];
    await execOnce(c, 4 * MiB);
    await f.once(4 * MiB);
    const sides = {
      tether: { rates: [] as number[], server: [] as number[], client: [] as number[] },
      floor: { rates: [] as number[], server: [] as number[], client: [] as number[] },
    };
    const timed = async (side: keyof typeof sides, pid: number, once: () => Promise<number>): Promise<void> => {
      const [serverCpu, clientCpu] = [cpuMs(pid), process.cpuUsage()];
      const elapsed = await once();
      const used = process.cpuUsage(clientCpu);
      sides[side].rates.push(STREAM_BYTES / MiB / (elapsed / 1000));
      sides[side].server.push(cpuMs(pid) - serverCpu);
      sides[side].client.push((used.user + used.system) / 1000);
    };
    await inTurn(
      () => timed('tether', server.pid, () => execOnce(c, STREAM_BYTES)),
      () => timed('floor', floor.child.pid!, () => f.once(STREAM_BYTES)),
    );
    const [t, fl] = [p50(sides.tether.rates), p50(sides.floor.rates)];
    const cpu = (side: keyof typeof sides) => `server ${per64(p50(sides[side].server), STREAM_BYTES)}, client ${per64(p50(sides[side].client), STREAM_BYTES)}`;
    rows.push([
      `stream: ExecClient, ${STREAM_BYTES / MiB} MiB binary frames`,
      `${t.toFixed(0)} MiB/s`,
      `${fl.toFixed(0)} MiB/s`,
      `${(t / fl).toFixed(2)}x`,
      '≥ 0.90x',
      verdict(t / fl >= 0.9),
      `${cpu('tether')}; ${cpu('floor')}`,
    ]);
  } finally {
    await client?.close();
    floorClient?.close();
    floor.stop();
    await server.stop();
  }
}

async function mcp(): Promise<void> {
  const server = await startTetherProcess();
  const chainServer = await startMcpFloorProcess(everythingCommand());
  const links = MCP_LINK === undefined ? [] : [await startLinkProcess(server.url, MCP_LINK), await startLinkProcess(chainServer.url, MCP_LINK)];
  const [tetherUrl, chainUrl] = MCP_LINK === undefined ? [server.url, chainServer.url] : links.map((link) => link.url);
  const paths = { tether: [] as number[], chain: [] as number[], local: [] as number[] };
  const clients: Array<{ close(): Promise<void> }> = [];
  try {
    const sides = await Promise.all(
      ([['tether', tetherMcpBridge(tetherUrl!)], ['chain', bareChainBridge(chainUrl!)], ['local', localStdio()]] as const).map(async ([name, transport]) => {
        const client = await mcpEchoClient(transport);
        clients.push(client);
        await client.calls(MCP_PER_BLOCK);
        return async () => void paths[name].push(...(await client.calls(MCP_PER_BLOCK)));
      }),
    );
    await inTurn(...(MCP_LINK === undefined ? sides : sides.slice(0, 2)));
    const [t, chain, local] = [p50(paths.tether), p50(paths.chain), p50(paths.local)];
    if (MCP_LINK === undefined) {
      rows.push(['mcp: tools/call p50, tether mcp vs local stdio', ms(t), ms(local), `+${ms(t - local)}`, '≤ +0.3 ms', verdict(t - local <= 0.3), '']);
      rows.push(['mcp: the bare two-process chain vs local stdio', ms(chain), ms(local), `+${ms(chain - local)}`, '(any remote path)', '', '']);
    }
    rows.push([`mcp: tether mcp vs the bare chain${MCP_LINK === undefined ? '' : `, across ${MCP_LINK} each way`}`, ms(t), ms(chain), `+${ms(t - chain)}`, '(tether\'s own part)', '', '']);
  } finally {
    await Promise.all(clients.map((client) => client.close()));
    for (const link of links) await link.stop();
    await chainServer.stop();
    await server.stop();
  }
}

async function relay(): Promise<void> {
  await eachUpstream(async (upstream) => {
    const { relayed, floored } = await measureRelayPaths(upstream, BLOCKS, RELAY_ECHO_PER_BLOCK);
    const echo = (p: Path) => p50(p.echo);
    const rate = (p: Path) => p50(p.rates);
    const cpu = `relay ${per64(p50(relayed.betweenCpu), 64 * MiB)}; proxy ${per64(p50(floored.betweenCpu), 64 * MiB)}`;
    const tether = upstream.name === 'tether';
    if (tether) {
      const ratio = echo(relayed) / echo(floored);
      rows.push([`relay (${upstream.name} upstream): echo p50`, ms(echo(relayed)), ms(echo(floored)), `${ratio.toFixed(2)}x`, '≤ 1.30x', verdict(ratio <= 1.3), '']);
    }
    const share = rate(relayed) / rate(floored);
    const target = tether ? 0.9 : 0.8;
    rows.push([
      `relay (${upstream.name} upstream): 64 MiB`,
      `${rate(relayed).toFixed(0)} MiB/s`,
      `${rate(floored).toFixed(0)} MiB/s`,
      `${(share * 100).toFixed(0)} %`,
      `≥ ${target * 100} %`,
      verdict(share >= target),
      cpu,
    ]);
  });
}

export async function run(): Promise<void> {
  const started = Date.now();
  for (const [name, measure] of [['stream', stream], ['mcp', mcp], ['relay', relay]] as const) {
    if (PATHS.includes(name)) await measure();
  }
  const links = [LINK === undefined ? '' : `the relay's upstream across a link of ${LINK} each way`, MCP_LINK === undefined ? '' : `the MCP servers across a link of ${MCP_LINK} each way`];
  const where = links.filter((link) => link !== '').join(', ') || 'loopback';
  process.stdout.write(`\nbench/floors.ts: every path against its floor (${where}; ${BLOCKS} alternating blocks; medians; ${((Date.now() - started) / 1000).toFixed(0)} s)\n`);
  process.stdout.write(table(rows) + '\n');
}

// `node --import tsx bench/floors.ts` runs just this one.
if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  await run();
  process.exit(0);
}
