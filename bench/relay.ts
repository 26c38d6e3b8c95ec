/**
 * What `tether relay` costs (issue 25): a raw Codex-dialect client (ws-rpc.ts) against an
 * upstream directly and through a relay in front of it, in the same run, in alternating blocks
 * so that other load on the machine hits both paths alike. Upstreams: a tether server, and the
 * Codex exec-server (BENCH_ONLY=tether|codex for one). Rows: the echo round trip (a line
 * written to `cat` → its output) and 64 MiB of `head -c` output, start → closed.
 * Targets: the relay's echo p50 at most 1.5x direct; its throughput at least 80 % of direct.
 *
 * The floor, in the same run: a bare proxy process (lib/proxy-floor.ts) that passes every
 * message across as it is. Nothing in it survives a cut, so no relay can cost less; the
 * `floor / direct` row is what one more process and two more socket hops cost on this machine,
 * and `relay / floor` is what the relay's guarantees cost on top of that.
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { cpuMs } from './lib/cpu.js';
import { echoRoundTrip, throughputRun } from './lib/measure.js';
import { startCodexProcess, startLinkProcess, startProxyFloorProcess, startRelayProcess, startTetherProcess, type BenchServer } from './lib/servers.js';
import { ms, summarize, table, verdict } from './lib/stats.js';
import { WsRpc } from './lib/ws-rpc.js';

const BLOCKS = Number(process.env.BENCH_RELAY_BLOCKS ?? 6);
const ECHO_PER_BLOCK = Number(process.env.BENCH_RELAY_ECHO ?? 30);
const THROUGHPUT_PER_BLOCK = Number(process.env.BENCH_RELAY_RUNS ?? 1);
export const LINK = process.env.BENCH_RELAY_LINK;

export interface Path {
  name: string;
  rpc: WsRpc;
  /** The process between the client and the upstream (the relay or the floor); none direct. */
  between?: BenchServer;
  echo: number[];
  rates: number[];
  /** CPU per 64 MiB run: of the process in between, and of the upstream server. */
  betweenCpu: number[];
  upstreamCpu: number[];
}

/**
 * The three paths (direct, via relay, via floor) to one upstream, measured in `blocks`
 * alternating blocks. `upstream.name` and `pid`, and the upstream's URL as every path reaches it
 * (across the link, if any).
 */
export async function measureRelayPaths(
  upstream: { name: string; url: string; pid: number },
  blocks = BLOCKS,
  echoPerBlock = ECHO_PER_BLOCK,
): Promise<{ direct: Path; relayed: Path; floored: Path }> {
  const relay = await startRelayProcess(upstream.url);
  let floor: BenchServer | undefined;
  try {
    floor = await startProxyFloorProcess(upstream.url);
    const path = async (name: string, between?: BenchServer): Promise<Path> => ({
      name: `${upstream.name} ${name}`,
      rpc: await WsRpc.session(between?.url ?? upstream.url),
      between,
      echo: [],
      rates: [],
      betweenCpu: [],
      upstreamCpu: [],
    });
    const paths: Path[] = [await path('direct'), await path('via relay', relay), await path('via floor', floor)];
    const measured = async (p: Path): Promise<void> => {
      const [between, up] = [p.between ? cpuMs(p.between.pid) : 0, cpuMs(upstream.pid)];
      p.rates.push(await throughputRun(p.rpc));
      p.betweenCpu.push(p.between ? cpuMs(p.between.pid) - between : Number.NaN);
      p.upstreamCpu.push(cpuMs(upstream.pid) - up);
    };
    for (let block = 0; block < blocks; block++) {
      // Each path first, middle and last in turn, so that other load hits them alike.
      const order = paths.map((_, i) => paths[(i + block) % paths.length]!);
      for (const p of order) p.echo.push(...(await echoRoundTrip(p.rpc, echoPerBlock, block === 0 ? 10 : 2)));
      for (const p of order) for (let i = 0; i < THROUGHPUT_PER_BLOCK; i++) await measured(p);
    }
    for (const p of paths) await p.rpc.close();
    const [direct, relayed, floored] = paths as [Path, Path, Path];
    return { direct, relayed, floored };
  } finally {
    await relay.stop();
    await floor?.stop();
  }
}

async function compare(upstream: { name: string; url: string; pid: number }): Promise<string[][]> {
  const { direct, relayed, floored } = await measureRelayPaths(upstream);
  const paths = [direct, relayed, floored];
  const echo = (p: Path) => summarize(p.echo).p50;
  const rate = (p: Path) => summarize(p.rates).p50;
  const ratioRow = (name: string, a: Path, b: Path, verdicts: boolean): string[] => {
    const echoRatio = echo(a) / echo(b);
    const rateRatio = rate(a) / rate(b);
    return [name, `${echoRatio.toFixed(2)}x`, '', `${(rateRatio * 100).toFixed(0)} %`, '', '', verdicts ? verdict(echoRatio <= 1.5) : '', verdicts ? verdict(rateRatio >= 0.8) : ''];
  };
  const cpu = (samples: number[]) => (samples.every(Number.isNaN) ? '' : `${summarize(samples).p50.toFixed(0)} ms`);
  return [
    ...paths.map((p) => [p.name, ms(echo(p)), ms(summarize(p.echo).p99), `${rate(p).toFixed(0)} MiB/s`, cpu(p.betweenCpu), cpu(p.upstreamCpu), '', '']),
    ratioRow(`relay / direct (${upstream.name})`, relayed, direct, true),
    ratioRow(`floor / direct (${upstream.name})`, floored, direct, true),
    ratioRow(`relay / floor (${upstream.name})`, relayed, floored, false),
  ];
}

/**
 * Each upstream (a tether server, the Codex exec-server; BENCH_ONLY=tether|codex for one), up
 * for the time of `each`, reached across BENCH_RELAY_LINK if set.
 */
export async function eachUpstream<T>(each: (upstream: { name: string; url: string; pid: number }) => Promise<T>): Promise<T[]> {
  const only = process.env.BENCH_ONLY;
  const results: T[] = [];
  for (const start of [
    { name: 'tether', up: () => startTetherProcess() },
    { name: 'codex', up: () => startCodexProcess() },
  ]) {
    if (only !== undefined && only !== start.name) continue;
    const upstream = await start.up();
    let link: BenchServer | undefined;
    try {
      link = LINK === undefined ? undefined : await startLinkProcess(upstream.url, LINK);
      results.push(await each({ name: start.name, url: link?.url ?? upstream.url, pid: upstream.pid }));
    } finally {
      await link?.stop();
      await upstream.stop();
    }
  }
  return results;
}

export async function run(): Promise<void> {
  // CPU: per 64 MiB run (medians; /proc's 10 ms ticks), of the relay or floor process, and of the upstream server.
  const rows: string[][] = [['path', 'echo p50', 'echo p99', '64 MiB p50', 'CPU between', 'CPU upstream', 'echo ≤ 1.5x', 'rate ≥ 80 %']];
  for (const compared of await eachUpstream(compare)) rows.push(...compared);
  const where = LINK === undefined ? 'loopback' : `every path across a link of ${LINK} each way`;
  process.stdout.write(`\ntether relay against direct (Codex dialect, raw ws client, ${where}; ${BLOCKS} alternating blocks, ${ECHO_PER_BLOCK} echoes and ${THROUGHPUT_PER_BLOCK} x 64 MiB per block and path)\n`);
  process.stdout.write(table(rows) + '\n');
}

// `node --import tsx bench/relay.ts` runs just this one.
if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  await run();
  process.exit(0);
}
