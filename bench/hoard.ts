/**
 * Others' latency while one client hoards (issue 22): what a well-behaved client waits for a
 * short command (`process/start` of `printf` → its output and `process/closed`) and for a
 * small file (`fs/readFile` of /etc/hostname), on a server where another client holds as much
 * as it can, against an idle server, as ratios measured in this run.
 *
 * Two tether servers with the same `--memory-budget` run side by side. On one, a hoarder
 * reads but never acknowledges (`acks`) while BENCH_HOARD_PRODUCERS producers write flat
 * out, and a deaf client (its socket paused) keeps asking for 8 MiB files; the other is idle.
 * Samples alternate between the two in blocks, so other load on the machine hits both alike.
 *   BENCH_ONLY_MODULE=hoard npm run bench
 * Knobs: BENCH_HOARD_SAMPLES (200), BENCH_HOARD_PRODUCERS (40), BENCH_HOARD_BUDGET (256MiB).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { ms, summarize, table } from './lib/stats.js';
import { readMemory } from './lib/rss.js';
import { startTetherProcess, type BenchServer } from './lib/servers.js';
import { startParams, WsRpc } from './lib/ws-rpc.js';

const SAMPLES = Number(process.env.BENCH_HOARD_SAMPLES ?? 200);
const PRODUCERS = Number(process.env.BENCH_HOARD_PRODUCERS ?? 40);
const BUDGET = process.env.BENCH_HOARD_BUDGET ?? '256MiB';
const BLOCK = 10;
/** A round that takes longer than this counts as frozen (and is recorded at this value). */
const ROUND_TIMEOUT_MS = 30_000;

function withTimeout<T>(promise: Promise<T>): Promise<T | 'timeout'> {
  let timer: NodeJS.Timeout;
  return Promise.race([promise, new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), ROUND_TIMEOUT_MS)))]).finally(() => clearTimeout(timer));
}

/** One short command: start → every output byte and `process/closed`. Milliseconds, or NaN when refused. */
async function commandRound(rpc: WsRpc, id: string): Promise<number> {
  const started = performance.now();
  let out = '';
  const closed = new Promise<void>((resolve) =>
    rpc.onProcess(id, (method, params) => {
      if (method === 'process/output') out += Buffer.from(params.chunk, 'base64').toString();
      if (method === 'process/closed') resolve();
    }),
  );
  try {
    await rpc.request('process/start', startParams(id, ['printf', 'hi']));
  } catch {
    rpc.offProcess(id);
    return Number.NaN;
  }
  const result = await withTimeout(closed);
  rpc.offProcess(id);
  if (result === 'timeout' || out !== 'hi') return ROUND_TIMEOUT_MS;
  return performance.now() - started;
}

async function fileRound(rpc: WsRpc): Promise<number> {
  const started = performance.now();
  const result = await withTimeout(rpc.request('fs/readFile', { path: 'file:///etc/hostname' }).catch(() => null));
  if (result === null) return Number.NaN;
  if (result === 'timeout') return ROUND_TIMEOUT_MS;
  return performance.now() - started;
}

/** The hoarder and the deaf client; returns what stops them. */
async function hoard(server: BenchServer, dir: string): Promise<() => void> {
  const hoarder = await WsRpc.connect(server.url);
  await hoarder.request('initialize', { clientName: 'hoarder', tether: { version: 1, extensions: ['acks'] } });
  hoarder.notify('initialized', {});
  for (let i = 0; i < PRODUCERS; i++) {
    await hoarder.request('process/start', startParams(`hoard-${i}`, ['head', '-c', '100M', '/dev/zero'])).catch(() => {});
  }
  const deaf = await WsRpc.session(server.url, 'deaf');
  deaf.socket.pause();
  let deafAsks = 0;
  const big = `file://${join(dir, 'big')}`;
  const timer = setInterval(() => {
    if (deafAsks++ < 200) deaf.request('fs/readFile', { path: big }).catch(() => {});
  }, 50);
  return () => {
    clearInterval(timer);
    hoarder.ws.terminate();
    deaf.ws.terminate();
  };
}

export async function run(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'tether-bench-hoard-'));
  writeFileSync(join(dir, 'big'), Buffer.alloc(8 * 1024 * 1024, 1));
  const idle = await startTetherProcess(['--memory-budget', BUDGET, '--log-level', 'error']);
  const hoarded = await startTetherProcess(['--memory-budget', BUDGET, '--log-level', 'error']);
  let stopHoard = (): void => {};
  try {
    stopHoard = await hoard(hoarded, dir);
    const clients = { idle: await WsRpc.session(idle.url, 'victim'), hoarded: await WsRpc.session(hoarded.url, 'victim') };
    const samples = { idle: { command: [] as number[], file: [] as number[] }, hoarded: { command: [] as number[], file: [] as number[] } };
    const refused = { idle: 0, hoarded: 0 };
    for (let done = 0; done < SAMPLES; done += BLOCK) {
      for (const side of ['idle', 'hoarded'] as const) {
        for (let i = 0; i < BLOCK; i++) {
          const c = await commandRound(clients[side], `v-${done + i}`);
          const f = await fileRound(clients[side]);
          if (Number.isNaN(c) || Number.isNaN(f)) refused[side]++;
          if (!Number.isNaN(c)) samples[side].command.push(c);
          if (!Number.isNaN(f)) samples[side].file.push(f);
        }
      }
    }
    const rss = readMemory(hoarded.pid).rss;
    const rows = [['round', 'idle p50', 'idle p99', 'hoarded p50', 'hoarded p99', 'p50 ratio', 'p99 ratio']];
    for (const kind of ['command', 'file'] as const) {
      const a = summarize(samples.idle[kind]);
      const b = summarize(samples.hoarded[kind]);
      rows.push([kind === 'command' ? 'printf → output, closed' : 'fs/readFile /etc/hostname', ms(a.p50), ms(a.p99), ms(b.p50), ms(b.p99), `${(b.p50 / a.p50).toFixed(2)}x`, `${(b.p99 / a.p99).toFixed(2)}x`]);
    }
    console.log(`\n## hoard: another client's latency while one hoards (${PRODUCERS} never-acked producers + a deaf reader, budget ${BUDGET})\n`);
    console.log(table(rows));
    console.log(`refused or failed rounds: idle ${refused.idle}, hoarded ${refused.hoarded}; frozen rounds count as ${ROUND_TIMEOUT_MS} ms; hoarded server's RSS at the end ${(rss / 2 ** 20).toFixed(0)} MiB`);
    await clients.idle.close();
    await clients.hoarded.close();
  } finally {
    stopHoard();
    await idle.stop();
    await hoarded.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}
