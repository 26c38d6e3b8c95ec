/**
 * What a state dir costs (issue #27): `tether serve --state-dir none` (processes die with the
 * server, output straight from the command to the server) against `tether serve --state-dir
 * DIR` (kept mode: every byte of output goes through the keeper, which retains it until the
 * server drops it, and stdin goes as frames answered once the keeper took them), in the same
 * run, in alternating blocks (A then B, B then A) so that other load hits both alike:
 *   - stdout throughput: `head -c 64MiB /dev/zero`, process/start → process/closed;
 *   - spawn→closed of `/bin/true` (a kept keeper also binds its Unix socket);
 *   - echo: process/write of a line to `cat` → its output (a kept write is answered once the
 *     keeper took the frame).
 * Medians; the ratio is kept / none (throughput: higher is better; times: lower is better).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ms, summarize, table } from './lib/stats.js';
import { echoRoundTrip, spawnToClosed, throughputRun } from './lib/measure.js';
import { startTetherProcess, type BenchServer } from './lib/servers.js';
import { WsRpc } from './lib/ws-rpc.js';

const BLOCKS = Number(process.env.BENCH_KEEP_BLOCKS ?? 8);
const SPAWNS = Number(process.env.BENCH_KEEP_SPAWNS ?? 20);
const ECHOES = Number(process.env.BENCH_KEEP_ECHOES ?? 50);

interface Side {
  name: string;
  server: BenchServer;
  rpc: WsRpc;
  throughput: number[];
  spawn: number[];
  echo: number[];
}

export async function run(): Promise<void> {
  const stateDir = mkdtempSync(join(tmpdir(), 'tether-bench-keep-'));
  const sides: Side[] = [];
  try {
    for (const [name, args] of [
      ['none', ['--state-dir', 'none']],
      ['kept', ['--state-dir', join(stateDir, 'd'), '--adopt-within', '5s']],
    ] as const) {
      const server = await startTetherProcess([...args]);
      sides.push({ name, server, rpc: await WsRpc.session(server.url), throughput: [], spawn: [], echo: [] });
    }
    for (let block = 0; block < BLOCKS; block++) {
      const order = block % 2 === 0 ? sides : [...sides].reverse();
      for (const side of order) {
        side.throughput.push(await throughputRun(side.rpc));
        side.spawn.push(...(await spawnToClosed(side.rpc, SPAWNS, block === 0 ? 3 : 0)));
        side.echo.push(...(await echoRoundTrip(side.rpc, ECHOES, block === 0 ? 5 : 0)));
      }
    }
    const [none, kept] = sides as [Side, Side];
    const p50 = (xs: number[]) => summarize(xs).p50;
    const rows = [
      ['row', 'state dir none', 'state dir (kept)', 'kept / none'],
      ['64 MiB stdout', `${p50(none.throughput).toFixed(0)} MiB/s`, `${p50(kept.throughput).toFixed(0)} MiB/s`, `${(p50(kept.throughput) / p50(none.throughput)).toFixed(2)}x`],
      ['spawn→closed p50', ms(p50(none.spawn)), ms(p50(kept.spawn)), `${(p50(kept.spawn) / p50(none.spawn)).toFixed(2)}x`],
      ['echo p50', ms(p50(none.echo)), ms(p50(kept.echo)), `${(p50(kept.echo) / p50(none.echo)).toFixed(2)}x`],
    ];
    console.log(`\n## keep: what a state dir costs (${BLOCKS} alternating blocks)\n`);
    console.log(table(rows));
  } finally {
    for (const side of sides) {
      await side.rpc.close();
      await side.server.stop();
    }
    rmSync(stateDir, { recursive: true, force: true });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) await run();
